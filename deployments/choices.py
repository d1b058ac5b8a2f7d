from django.db import models


class State(models.TextChoices):
    PENDING_APPROVAL = "pending_approval", "Pending approval"
    APPROVED = "approved", "Approved"
    QUEUED = "queued", "Queued in Kueue"
    PROVISIONING = "provisioning", "Provisioning"
    READY = "ready", "Ready"
    DEGRADED = "degraded", "Degraded"
    FAILED = "failed", "Failed"
    STOPPED = "stopped", "Stopped"
    DELETING = "deleting", "Deleting"
    DELETED = "deleted", "Deleted"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"


def backend_choices() -> list[tuple[str, str]]:
    """Every registered backend (runtime.backends), with its label: the registry is the one list,
    so a backend added there is a choice here with no other edit."""
    from runtime.backends import names, traits

    return [(name, traits(name).label) for name in names()]


def default_backend() -> str:
    from django.conf import settings

    return settings.RUNTIME_DEFAULT_BACKEND


class Quantization(models.TextChoices):
    NONE = "", "No quantization"  # not "None": the pages read a bare None as a missing value
    FP8 = "fp8", "FP8"
    AWQ = "awq", "AWQ (4-bit)"
    GPTQ = "gptq", "GPTQ (4-bit)"


class ServingProfile(models.TextChoices):
    """Presets for the engine and scaling fields (issue 22: deployments.profiles)."""

    CUSTOM = "", "Custom"
    THROUGHPUT = "throughput", "Throughput"
    LATENCY = "latency", "Latency"
    COST = "cost", "Cost"


class Dtype(models.TextChoices):
    AUTO = "auto", "auto (from the model)"
    BFLOAT16 = "bfloat16", "bfloat16"
    FLOAT16 = "float16", "float16"
    FLOAT32 = "float32", "float32"


class KvCacheDtype(models.TextChoices):
    """vLLM's `--kv-cache-dtype`: the values of v0.32.0's CacheDType (vllm/config/cache.py) whose
    bytes per element the estimate knows (deployments.sizing.KV_CACHE_BYTES). Left out: scaled or
    packed formats (nvfp4*, int4/int8/fp8_per_token_head, turboquant*, ultraquant*), which carry
    per-block scales, and the platform- or model-specific fp8_inc (Gaudi) and *_ds_mla (DeepSeek)."""

    AUTO = "auto", "auto (the model's dtype)"
    BFLOAT16 = "bfloat16", "bfloat16"
    FLOAT16 = "float16", "float16"
    FP8 = "fp8", "FP8 (E4M3)"
    FP8_E4M3 = "fp8_e4m3", "FP8 E4M3"
    FP8_E5M2 = "fp8_e5m2", "FP8 E5M2"


class EventType(models.TextChoices):
    NORMAL = "Normal", "Normal"
    WARNING = "Warning", "Warning"


class RevisionStatus(models.TextChoices):
    """Where one spec revision of a deployment stands (deployments.revisions)."""

    PROPOSED = "proposed", "Waiting for approval"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    WITHDRAWN = "withdrawn", "Withdrawn"
    SUPERSEDED = "superseded", "Superseded"
