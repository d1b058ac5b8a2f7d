"""Validation of a deployment draft, shared by the API serializer and the browser form.

Everything here ends up in Kubernetes labels, YAML or engine flags, so strings are held to
strict patterns (no whitespace, newlines or non-ASCII) and numbers to explicit ranges.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from django.conf import settings

from deployments import sizing
from deployments.choices import ServingProfile
from quotas.choices import Fit
from quotas.models import GpuFlavor, Tenant
from quotas.policy import policy_errors
from quotas.services import QuotaPreview, quota_preview
from runtime.backends import names as backend_names
from runtime.backends import not_installed
from runtime.backends import traits as backend_traits
from runtime.backends.local.paths import confined_model_path
from runtime.manifests.common import DNS1035_LABEL, placement_error
from runtime.manifests.rayservice import RAYSERVICE_NAME_MAX
from runtime.manifests.syntax import dns1123_subdomain_problem

NAME_MAX = 40  # "<name>-<id>" must stay within RAYSERVICE_NAME_MAX for ids below 10^6
HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/=-]*)?$")
PVC_URI = re.compile(r"^pvc://([a-z0-9]([-a-z0-9]*[a-z0-9])?)(/[A-Za-z0-9._/-]*)?$")
LOCAL_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")
_SOURCE_FORMS = "Use a Hugging Face id (org/model), an s3://bucket/path URI or pvc://claim/path"
SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


@dataclass
class DraftCheck:
    """The outcome of checking a draft: field errors plus the quota and memory previews."""

    errors: dict[str, str]
    quota: QuotaPreview | None = None
    memory: sizing.MemoryFit | None = None
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {
            "valid": not self.errors,
            "errors": self.errors,
            "gpus_per_replica": None,
            "quota": self.quota.as_dict() if self.quota else None,
            "memory": self.memory.as_dict() if self.memory else None,
            "warnings": list(self.warnings),
        }


def _name_errors(name: str) -> str | None:
    if not name:
        return "Enter a name."
    if len(name) > NAME_MAX:
        return f"At most {NAME_MAX} characters (the RayService name must stay ≤ {RAYSERVICE_NAME_MAX})."
    if not DNS1035_LABEL.fullmatch(name):
        # KubeRay and KServe need a DNS-1035 label (runtime/manifests/common.py): a name the API
        # server takes and the operator then refuses for good is refused here instead.
        return "Use lowercase letters, digits and '-', starting with a letter and ending with a letter or digit."
    return None


def _source_error(source: str, backend: str) -> str | None:
    """Why `source` cannot be a model source for `backend`, or None.

    A source becomes a path somewhere: `pvc://claim/p` is mounted at /models/claim/p in the
    worker pod, an s3:// key is downloaded under the engine's model directory, a local path is
    what the local engine opens. So no segment may climb (`..`), stand still (`.`) or be empty
    (`//`, which also makes the rest absolute: pvc://claim//etc), and nothing may be spelled
    in a way a later layer decodes into one of those (percent-encoding, backslashes). Local
    paths must also resolve, symlinks included, inside LOCAL_MODEL_ROOT.
    """
    if not source:
        return "Enter a model source."
    if any(not 0x20 < ord(char) < 0x7F for char in source):
        return "No spaces, control characters or non-ASCII in a model source."
    if "%" in source:
        return "No percent-encoding in a model source: write the path as it is."
    if "\\" in source:
        return "No backslashes in a model source: separate path segments with '/'."
    scheme, has_scheme, path = source.partition("://")
    if has_scheme and scheme not in ("s3", "pvc"):
        return _accepted_forms(backend)
    segments = (path if has_scheme else source).removesuffix("/").split("/")  # a trailing "/" is harmless
    if source.startswith("/"):
        segments = segments[1:]  # an absolute path's leading root
    if ".." in source or any(segment in ("", ".") for segment in segments):
        return "A model source may not contain '..', or empty or '.' path segments."
    if HF_ID.fullmatch(source) or S3_URI.fullmatch(source) or PVC_URI.fullmatch(source):
        return None
    if _trait(backend, "local_paths", default=False) and LOCAL_PATH.fullmatch(source):
        try:
            confined_model_path(source, settings.LOCAL_MODEL_ROOT)
        except ValueError as error:
            return str(error)
        return None
    return _accepted_forms(backend)


def _trait(backend: str, name: str, *, default: bool) -> bool:
    """A registered backend's trait; an unknown name (refused with its own field error) gets `default`."""
    return getattr(backend_traits(backend), name) if backend in backend_names() else default


def _accepted_forms(backend: str) -> str:
    local = _trait(backend, "local_paths", default=False)
    return _SOURCE_FORMS + (f" or a path under {settings.LOCAL_MODEL_ROOT}." if local else ".")


def check_draft(data: dict, *, tenant: Tenant | None, credit_gpus: int = 0, with_quota: bool = True) -> DraftCheck:
    """Check a cleaned draft (types already coerced). `credit_gpus`: GPUs the deployment
    already holds (an update or scale), so they are not counted twice."""
    errors: dict[str, str] = {}
    warnings: list[str] = []
    backend = data.get("backend") or settings.RUNTIME_DEFAULT_BACKEND
    if backend not in settings.RUNTIME_BACKENDS:
        errors["backend"] = f"Backend {backend!r} is not offered here ({', '.join(settings.RUNTIME_BACKENDS)})."
    elif absent := not_installed(backend):  # what the last sweep or readiness check found: no API call
        errors["backend"] = f"{absent} Choose another backend, or ask a platform admin to install it."
    if "name" in data and (msg := _name_errors(data.get("name") or "")):
        errors["name"] = msg
    if msg := _source_error(data.get("model_source") or "", backend):
        errors["model_source"] = msg
    if data.get("serving_profile") not in (None, *ServingProfile.values):
        errors["serving_profile"] = f"Choose one of: {', '.join(p or 'custom (empty)' for p in ServingProfile.values)}."
    served = data.get("served_model_name") or ""
    if served and not SERVED_NAME.fullmatch(served):
        errors["served_model_name"] = "Letters, digits, '.', '_', '-', '/' only (at most 200)."
    secret = data.get("hf_token_secret") or ""
    if secret and (problem := dns1123_subdomain_problem(secret)):  # a Secret's name: a DNS-1123 subdomain
        errors["hf_token_secret"] = f"Not a valid Kubernetes Secret name. {problem}"
    flavor: GpuFlavor | None = data.get("flavor")
    if flavor is None:
        errors["flavor"] = "Choose a GPU flavor."
    elif not flavor.active:
        errors["flavor"] = "This GPU flavor is not offered any more."
    tp, pp = data.get("tensor_parallel_size") or 1, data.get("pipeline_parallel_size") or 1
    lo, hi = data.get("min_replicas"), data.get("max_replicas") or 1
    if lo is None:
        lo = 1
    if lo > hi:
        errors["min_replicas"] = "Minimum replicas cannot exceed maximum replicas."
    util = data.get("gpu_memory_utilization", 0.9)
    if util is None or not math.isfinite(util) or not 0.5 <= util <= 0.98:
        errors["gpu_memory_utilization"] = "Between 0.5 and 0.98."
    mml, mbt = data.get("max_model_len"), data.get("max_num_batched_tokens")
    if mml and mbt and not data.get("enable_chunked_prefill", True) and mbt < mml:
        errors["max_num_batched_tokens"] = (
            "Without chunked prefill, max batched tokens must be at least max model length "
            "(a whole prompt is scheduled in one step)."
        )
    if flavor is not None and "flavor" not in errors:
        backend = data.get("backend") or settings.RUNTIME_DEFAULT_BACKEND
        problem = placement_error(
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            gpus_per_node=flavor.gpus_per_node,
            flavor=flavor.name,
            whole_node_pods=_trait(backend, "whole_node_pods", default=False),
        )
        if problem:
            errors["tensor_parallel_size"] = problem[0].upper() + problem[1:] + "."
    check = DraftCheck(errors=errors)
    if flavor is not None and "tensor_parallel_size" not in errors and util and "gpu_memory_utilization" not in errors:
        check.memory = sizing.estimate(
            model_source=data.get("model_source") or "",
            parameter_count_b=data.get("parameter_count_b"),
            dtype=data.get("dtype") or "auto",
            quantization=data.get("quantization") or "",
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            max_model_len=mml,
            gpu_memory_gib=flavor.gpu_memory_gib,
            gpu_memory_utilization=util,
        )
        if check.memory.verdict == "does_not_fit" and (
            backend not in backend_names() or backend_traits(backend).sized_for_gpus
        ):
            errors["tensor_parallel_size"] = check.memory.message
        elif check.memory.verdict == "thin":
            warnings.append(check.memory.message)
    if tenant is not None:  # the tenant's policy (quotas.policy): allowed flavors, GPUs per deployment
        for field, message in policy_errors(tenant=tenant, flavor=flavor, gpus=hi * tp * pp).items():
            errors.setdefault(field, message)
    if with_quota and tenant is not None and flavor is not None and not errors:
        check.quota = quota_preview(tenant=tenant, flavor=flavor, gpus=hi * tp * pp, credit_gpus=credit_gpus)
        if check.quota.fit == Fit.NO_FIT:
            errors["max_replicas"] = check.quota.message
        elif check.quota.fit == Fit.BORROWING:
            warnings.append(check.quota.message)
    check.warnings = tuple(warnings)
    return check
