"""What the portal keeps in each tenant namespace besides the queues: the model-cache claim and
the tenant's credential Secrets. Pure: no Django, no client.

The claim (`render_model_cache_claim`) is ReadWriteMany, because every engine pod of every
deployment of the tenant mounts it at once (runtime.manifests.common.model_cache_volume). Its
size and storage class come from the platform's settings or the tenant's override; both are
checked here before they become fields (`claim_problems`).

The Secrets have names fixed by the portal (`HF_TOKEN_SECRET`, `S3_SECRET`): what a person types
goes only into `stringData` values, never into a name, a key, a label or an annotation. Their keys
are the ones the consumers read: `HF_TOKEN` (common.hf_token_env's secretKeyRef), and the AWS SDK's
variable names for S3 (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`,
`AWS_DEFAULT_REGION`), which the AWS SDKs and CLI read as environment variables.

`s3_credentials_env` hands the S3 Secret to an engine container whose model source is `s3://`, as
optional secretKeyRefs: the value never appears in a manifest, and a pod still starts when the
tenant has set no credentials (the SDK then falls back to its default chain: IRSA, instance profile).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from runtime.manifests import syntax
from runtime.manifests.common import portal_labels

HF_TOKEN_SECRET = "llm-portal-hf-token"
HF_TOKEN_KEY = "HF_TOKEN"
S3_SECRET = "llm-portal-s3"
S3_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")

# A claim of 1 GiB to 1 PiB: the engines' weights are GiBs, and a larger number is a typo.
CACHE_SIZE_MIN_GI = 1
CACHE_SIZE_MAX_GI = 2**20

_SUFFIXES = {
    "": 1,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
# k8s.io/apimachinery pkg/api/resource/quantity.go: a signed decimal number, then a binary or
# decimal SI suffix or a decimal exponent ("1e3", "1E3").
_QUANTITY = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")


def _shown(value: object) -> str:
    return repr(value)[:80]


def quantity_bytes(value: object) -> Decimal | None:
    """A storage quantity as a number of bytes, or None when it is not a quantity."""
    if not isinstance(value, str | int):
        return None
    match = _QUANTITY.fullmatch(str(value))
    if match is None:
        return None
    number, suffix = match.groups()
    try:
        amount = Decimal(number)
        if suffix and suffix[0] in "eE":
            return amount * (Decimal(10) ** int(suffix[1:]))
        return amount * _SUFFIXES[suffix or ""]
    except (InvalidOperation, ValueError):
        return None


def cache_size_problem(size_gi: object) -> str | None:
    """Why `size_gi` is not a claim size in GiB (None: it is)."""
    if isinstance(size_gi, bool) or not isinstance(size_gi, int):
        return "Enter a whole number of GiB."
    if not CACHE_SIZE_MIN_GI <= size_gi <= CACHE_SIZE_MAX_GI:
        return f"Between {CACHE_SIZE_MIN_GI} and {CACHE_SIZE_MAX_GI} GiB."
    return None


def storage_class_problem(name: object) -> str | None:
    """Why `name` is not a StorageClass name; "" (the cluster's default class) is one."""
    if name == "":
        return None
    return syntax.dns1123_subdomain_problem(name)


def claim_problems(name: object, size_gi: object, storage_class: object) -> list[str]:
    """Everything the claim's fields would fail at the API server, one sentence each."""
    problems = []
    if problem := syntax.dns1123_subdomain_problem(name):
        problems.append(f"Claim name {_shown(name)}: {problem}")
    if problem := cache_size_problem(size_gi):
        problems.append(f"Claim size {_shown(size_gi)}: {problem}")
    if problem := storage_class_problem(storage_class):
        problems.append(f"Storage class {_shown(storage_class)}: {problem}")
    return problems


def render_model_cache_claim(
    *, name: str, namespace: str, tenant_slug: str, size_gi: int, storage_class: str
) -> dict[str, Any]:
    """The tenant's model-cache PersistentVolumeClaim (ReadWriteMany, `size_gi` GiB). An empty
    `storage_class` leaves `storageClassName` out: the cluster's default class provisions it."""
    problems = claim_problems(name, size_gi, storage_class)
    if problems:
        raise ValueError(" ".join(problems))
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": f"{size_gi}Gi"}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": portal_labels(tenant_slug)},
        "spec": spec,
    }


def s3_credentials_env(model_source: str) -> list[dict[str, Any]]:
    """The tenant's S3 credentials as container env, for an `s3://` model source only ([] otherwise).

    Each variable is an optional secretKeyRef to `S3_SECRET`: the kubelet leaves a variable out when
    the Secret or its key is absent, so the pod starts either way and the AWS client falls back to its
    default credential chain. Values are read when the container starts: a rotated Secret reaches a
    running engine on its next restart.
    """
    if not model_source.startswith("s3://"):
        return []
    return [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": S3_SECRET, "key": key, "optional": True}}}
        for key in S3_KEYS
    ]


def render_tenant_secret(*, name: str, namespace: str, tenant_slug: str, values: dict[str, str]) -> dict[str, Any]:
    """An Opaque Secret with `values` as `stringData`. Only the two names and key sets above are
    rendered: a name or key from anywhere else is a programming error."""
    keys = {HF_TOKEN_SECRET: (HF_TOKEN_KEY,), S3_SECRET: S3_KEYS}.get(name)
    if keys is None or set(values) != set(keys):
        raise ValueError(f"not a tenant Secret of the portal: {name!r} with keys {sorted(values)}")
    if not all(isinstance(value, str) and value for value in values.values()):
        raise ValueError("every value of a tenant Secret is a non-empty string")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": portal_labels(tenant_slug)},
        "type": "Opaque",
        "stringData": {key: values[key] for key in keys},
    }
