"""GPU-memory fit estimate for a deployment draft.

Per GPU: weights / (TP × PP) plus the KV cache for one max-length sequence, split the same way,
against the flavor's memory × gpu_memory_utilization. Activations and CUDA graphs are ignored,
which is why thin headroom (< 10 % of the budget) is a warning and not a pass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from deployments.catalog import lookup

GIB = 1024**3
BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "auto": 2.0}
QUANT_BYTES = {"fp8": 1.0, "awq": 0.5, "gptq": 0.5}
THIN_HEADROOM = 0.10


@dataclass(frozen=True)
class MemoryFit:
    """The estimate and its verdict: fits / thin / does_not_fit / unknown."""

    verdict: str
    budget_gib: float
    weights_gib: float | None
    kv_gib: float | None
    total_gib: float | None
    headroom_gib: float | None
    message: str

    def as_dict(self) -> dict:
        return asdict(self)


def estimate(
    *,
    model_source: str,
    parameter_count_b: float | None,
    dtype: str,
    quantization: str,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    max_model_len: int | None,
    gpu_memory_gib: float,
    gpu_memory_utilization: float,
) -> MemoryFit:
    """Estimate per-GPU memory for a draft; unknown models without a parameter count get
    'unknown' (weights-free) rather than a guess."""
    shards = max(1, tensor_parallel_size * pipeline_parallel_size)
    budget = gpu_memory_gib * gpu_memory_utilization
    info = lookup(model_source)
    params_b = parameter_count_b or (info.parameters_b if info else None)
    if params_b is None:
        return MemoryFit(
            "unknown",
            round(budget, 2),
            None,
            None,
            None,
            None,
            "Model not in the catalog: give its parameter count for a memory estimate.",
        )
    bytes_per_param = QUANT_BYTES.get(quantization or "", BYTES_PER_PARAM.get(dtype, 2.0))
    weights = params_b * 1e9 * bytes_per_param / shards / GIB
    kv = None
    if info is not None:
        seq = max_model_len or info.max_context
        kv_dtype = 1.0 if quantization == "fp8" else BYTES_PER_PARAM.get(dtype, 2.0)
        kv = info.kv_bytes_per_token_at(kv_dtype) * seq / shards / GIB
    total = weights + (kv or 0.0)
    headroom = budget - total
    numbers = dict(
        budget_gib=round(budget, 2),
        weights_gib=round(weights, 2),
        kv_gib=None if kv is None else round(kv, 2),
        total_gib=round(total, 2),
        headroom_gib=round(headroom, 2),
    )
    kv_note = "" if kv is not None else " (weights only: KV cache unknown for this model)"
    if headroom < 0:
        return MemoryFit(
            "does_not_fit",
            message=(
                f"Needs about {total:.1f} GiB per GPU{kv_note}, more than the {budget:.1f} GiB budget "
                f"({gpu_memory_gib} GiB × {gpu_memory_utilization}). Raise tensor/pipeline parallelism, "
                f"quantize, or shorten max model length."
            ),
            **numbers,
        )
    if headroom < THIN_HEADROOM * budget:
        return MemoryFit(
            "thin",
            message=(
                f"Fits with thin headroom: {total:.1f} of {budget:.1f} GiB per GPU{kv_note}; little room "
                f"for concurrent sequences in the KV cache."
            ),
            **numbers,
        )
    return MemoryFit("fits", message=(f"Fits: about {total:.1f} of {budget:.1f} GiB per GPU{kv_note}."), **numbers)
