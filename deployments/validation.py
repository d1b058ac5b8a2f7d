"""Validation of a deployment draft, shared by the API serializer and the browser form.

Everything here ends up in Kubernetes labels, YAML or engine flags, so strings are held to
strict patterns (no whitespace, newlines or non-ASCII) and numbers to explicit ranges.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings

from catalog.choices import Task
from catalog.sources import revision_error, source_error
from deployments import sizing
from deployments.choices import KvCacheDtype, ServingProfile
from deployments.preemption import victims
from deployments.preemption import words as preemption_words
from quotas.choices import Fit
from quotas.models import GpuFlavor, Tenant
from quotas.policy import policy_errors, tier_error
from quotas.pricing import price_per_hour
from quotas.services import QuotaPreview, quota_preview
from runtime.backends import names as backend_names
from runtime.backends import not_installed
from runtime.backends import traits as backend_traits
from runtime.manifests.common import DNS1035_LABEL, placement_error
from runtime.manifests.rayservice import RAYSERVICE_NAME_MAX
from runtime.manifests.syntax import dns1123_subdomain_problem
from runtime.manifests.tenant_route import TENANT_SEGMENT

NAME_MAX = 40  # "<name>-<id>" must stay within RAYSERVICE_NAME_MAX for ids below 10^6
SERVED_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")


@dataclass
class DraftCheck:
    """The outcome of checking a draft: every problem found, per field (several checks may refuse
    the same field: the memory estimate, the policy and the quota are independent, and one must not
    hide another), plus the quota and memory previews and the price per hour."""

    errors: dict[str, list[str]] = field(default_factory=dict)
    quota: QuotaPreview | None = None
    memory: sizing.MemoryFit | None = None
    warnings: tuple[str, ...] = ()
    gpus: int | None = None  # max replicas × TP × PP, when those are known
    price_per_gpu_hour: Decimal | None = None
    price_per_hour: Decimal | None = None  # quotas.pricing; None without a price (or without GPUs)

    def add(self, name: str, message: str) -> None:
        messages = self.errors.setdefault(name, [])
        if message not in messages:
            messages.append(message)

    def as_dict(self) -> dict:
        return {
            "valid": not self.errors,
            "errors": self.errors,
            "gpus_per_replica": None,
            "gpus": self.gpus,
            "price_per_hour": None if self.price_per_hour is None else f"{self.price_per_hour:.2f}",
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
    if name == TENANT_SEGMENT:
        return f"{name!r} is the path of the tenant's endpoint (/<tenant>/{TENANT_SEGMENT}): choose another name."
    return None


def _source_error(source: str, backend: str) -> str | None:
    """Why `source` cannot be a model source for `backend`, or None (catalog.sources has the rule)."""
    return source_error(source, local_paths=_trait(backend, "local_paths", default=False))


def _trait(backend: str, name: str, *, default: bool) -> bool:
    """A registered backend's trait; an unknown name (refused with its own field error) gets `default`."""
    return getattr(backend_traits(backend), name) if backend in backend_names() else default


# What each estimate needs: a value its own field refused leaves the estimate out rather than
# guessing it (the form passes the fields its type and range checks refused).
SIZING = ("tensor_parallel_size", "pipeline_parallel_size", "max_replicas")
MEMORY_INPUTS = (
    *SIZING[:2],
    "flavor",
    "model_source",
    "parameter_count_b",
    "dtype",
    "quantization",
    "kv_cache_dtype",
    "max_model_len",
    "gpu_memory_utilization",
)


def check_draft(
    data: dict,
    *,
    tenant: Tenant | None,
    credit_gpus: int = 0,
    with_quota: bool = True,
    refused: Collection[str] = (),
    exclude: int | None = None,
) -> DraftCheck:
    """Check a cleaned draft (types already coerced) and report every problem at once.

    `credit_gpus`: GPUs the deployment already holds (an update or scale), so they are not
    counted twice. `refused`: fields their own type or range check refused (the browser form's
    field errors); their rules are skipped, and so is an estimate that needs their value.
    `exclude`: the deployment being changed (never its own preemption victim).
    """
    check = DraftCheck()
    backend = data.get("backend") or settings.RUNTIME_DEFAULT_BACKEND
    _check_fields(check, data, backend, refused)
    flavor: GpuFlavor | None = data.get("flavor")
    flavor_ok = flavor is not None and "flavor" not in check.errors
    tp, pp = data.get("tensor_parallel_size") or 1, data.get("pipeline_parallel_size") or 1
    if not set(SIZING) & set(refused):
        check.gpus = (data.get("max_replicas") or 1) * tp * pp
    if flavor_ok:
        _check_placement(check, flavor, tp=tp, pp=pp, backend=backend)
        if not set(MEMORY_INPUTS) & {*refused, *check.errors}:
            _check_memory(check, data, flavor, backend=backend)
    if check.gpus is not None and flavor is not None:
        check.price_per_gpu_hour = flavor.price_per_gpu_hour
        check.price_per_hour = price_per_hour(flavor, check.gpus)
    if tenant is not None and "tenant" not in refused:  # the tenant's policy (quotas.policy)
        source_ok = not {"model_source", "model_revision"} & {*refused, *check.errors}
        model = {  # the model allow-list and gating see a source its own rule took (None: not checked)
            "model_source": (data.get("model_source") or "") if source_ok else None,
            "model_revision": data.get("model_revision") or "",
            "hf_token_secret": data.get("hf_token_secret") or "",
        }
        for name, message in policy_errors(tenant=tenant, flavor=flavor, gpus=check.gpus or 0, **model).items():
            check.add(name, message)
        if msg := tier_error(tenant, data.get("priority_tier") or ""):
            check.add("priority_tier", msg)
    # The quota answers on its own, whatever else is wrong: "no quota for this flavor" must show
    # beside a memory problem, not after it is fixed. A refused tenant (archived, budget spent)
    # already says that no GPUs can be reserved.
    if with_quota and tenant is not None and flavor_ok and check.gpus is not None and "tenant" not in check.errors:
        check.quota = quota_preview(tenant=tenant, flavor=flavor, gpus=check.gpus, credit_gpus=credit_gpus)
        taken = []
        if check.quota.fit == Fit.NO_FIT and check.quota.has_quota:  # a higher tier: Kueue makes room
            tier = data.get("priority_tier") or ""
            taken = victims(
                tenant=tenant, flavor=flavor, gpus=check.gpus, tier=tier, exclude=exclude, credit_gpus=credit_gpus
            )
        if taken:
            check.warnings += (preemption_words(taken),)
        elif check.quota.fit == Fit.NO_FIT:
            check.add("max_replicas" if check.quota.has_quota else "flavor", check.quota.message)
        elif check.quota.fit == Fit.BORROWING:
            check.warnings += (check.quota.message,)
    return check


def _check_fields(check: DraftCheck, data: dict, backend: str, refused: Collection[str]) -> None:
    """The rules of single fields and of pairs of fields."""
    if backend not in settings.RUNTIME_BACKENDS:
        check.add("backend", f"Backend {backend!r} is not offered here ({', '.join(settings.RUNTIME_BACKENDS)}).")
    elif absent := not_installed(backend):  # what the last sweep or readiness check found: no API call
        check.add("backend", f"{absent} Choose another backend, or ask a platform admin to install it.")
    if "name" in data and (msg := _name_errors(data.get("name") or "")):
        check.add("name", msg)
    if "model_source" not in refused and (msg := _source_error(data.get("model_source") or "", backend)):
        check.add("model_source", msg)
    source = None if "model_source" in {*refused, *check.errors} else data.get("model_source") or ""
    if msg := revision_error(data.get("model_revision") or "", source=source):
        check.add("model_revision", msg)
    if data.get("serving_profile") not in (None, *ServingProfile.values):
        check.add(
            "serving_profile", f"Choose one of: {', '.join(p or 'custom (empty)' for p in ServingProfile.values)}."
        )
    if data.get("kv_cache_dtype") not in (None, *KvCacheDtype.values):
        check.add("kv_cache_dtype", f"Choose one of: {', '.join(KvCacheDtype.values)}.")
    if data.get("task") not in (None, *Task.values):
        check.add("task", f"Choose one of: {', '.join(Task.values)}.")
    served = data.get("served_model_name") or ""
    if served and not SERVED_NAME.fullmatch(served):
        check.add("served_model_name", "Letters, digits, '.', '_', '-', '/' only (at most 200).")
    secret = data.get("hf_token_secret") or ""
    if secret and (problem := dns1123_subdomain_problem(secret)):  # a Secret's name: a DNS-1123 subdomain
        check.add("hf_token_secret", f"Not a valid Kubernetes Secret name. {problem}")
    flavor: GpuFlavor | None = data.get("flavor")
    if flavor is None and "flavor" not in refused:
        check.add("flavor", "Choose a GPU flavor.")
    elif flavor is not None and not flavor.active:
        check.add("flavor", "This GPU flavor is not offered any more.")
    lo, hi = data.get("min_replicas"), data.get("max_replicas") or 1
    if lo is not None and "max_replicas" not in refused and lo > hi:
        check.add("min_replicas", "Minimum replicas cannot exceed maximum replicas.")
    util = data.get("gpu_memory_utilization", 0.9)
    if "gpu_memory_utilization" not in refused and (util is None or not math.isfinite(util) or not 0.5 <= util <= 0.98):
        check.add("gpu_memory_utilization", "Between 0.5 and 0.98.")
    mml, mbt = data.get("max_model_len"), data.get("max_num_batched_tokens")
    if mml and mbt and not data.get("enable_chunked_prefill", True) and mbt < mml:
        check.add(
            "max_num_batched_tokens",
            "Without chunked prefill, max batched tokens must be at least max model length "
            "(a whole prompt is scheduled in one step).",
        )


def _check_placement(check: DraftCheck, flavor: GpuFlavor, *, tp: int, pp: int, backend: str) -> None:
    problem = placement_error(
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        gpus_per_node=flavor.gpus_per_node,
        flavor=flavor.name,
        whole_node_pods=_trait(backend, "whole_node_pods", default=False),
    )
    if problem:
        check.add("tensor_parallel_size", problem[0].upper() + problem[1:] + ".")


def _check_memory(check: DraftCheck, data: dict, flavor: GpuFlavor, *, backend: str) -> None:
    """The per-GPU memory estimate (deployments.sizing): a refusal where the backend is sized for
    GPUs, a warning when the headroom is thin."""
    check.memory = sizing.estimate(
        model_source=data.get("model_source") or "",
        parameter_count_b=data.get("parameter_count_b"),
        dtype=data.get("dtype") or "auto",
        quantization=data.get("quantization") or "",
        kv_cache_dtype=data.get("kv_cache_dtype") or "auto",
        tensor_parallel_size=data.get("tensor_parallel_size") or 1,
        pipeline_parallel_size=data.get("pipeline_parallel_size") or 1,
        max_model_len=data.get("max_model_len"),
        gpu_memory_gib=flavor.gpu_memory_gib,
        gpu_memory_utilization=data.get("gpu_memory_utilization", 0.9),
        backend=backend,  # an engine given a fixed KV cache (the local one) is estimated with it
    )
    if check.memory.verdict == "does_not_fit" and (
        backend not in backend_names() or backend_traits(backend).sized_for_gpus
    ):
        check.add("tensor_parallel_size", check.memory.message)
    elif check.memory.verdict == "thin":
        check.warnings += (check.memory.message,)
