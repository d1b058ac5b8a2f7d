"""GPU-memory fit estimate for a deployment draft, from the model's own facts (deployments.catalog).

Per GPU: the weights split over TP × PP, plus the KV cache of one max-length sequence, against the
flavor's memory × gpu_memory_utilization; what is left after the weights, divided by the KV bytes a
token takes on one GPU, is the KV capacity in tokens (what vLLM reports at start as its "KV cache
size ... tokens" and in `vllm:cache_config_info`). Activations, CUDA graphs and the non-torch memory
vLLM subtracts are ignored, so the capacity is an upper bound and thin headroom (< 10 % of the
budget) is a warning, not a pass.

A backend whose engine is given its KV cache outright (its traits' `fixed_kv_cache`: the local
backend's vLLM CPU build, VLLM_CPU_KVCACHE_SPACE GiB) is sized by that cache instead: its bytes in
whole blocks of every layer's page (`fixed_kv_tokens`), on the engine's own TP × PP, whatever the
flavor's memory; so the page compares the estimate with what that engine reports like with like.

The KV cache's dtype is the `kv_cache_dtype` engine option alone: quantizing the weights (FP8, AWQ,
GPTQ) leaves vLLM's cache at the model's dtype unless `--kv-cache-dtype` says otherwise
(vllm/config/cache.py in v0.32.0: `cache_dtype = "auto"`, "will use model data type").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from deployments.catalog import facts_for
from runtime.backends import FixedKvCache
from runtime.backends import names as backend_names
from runtime.backends import traits as backend_traits
from runtime.modelfacts import ModelFacts

GIB = 1024**3
# Bytes per weight element at each `dtype` engine option. "auto" is the checkpoint's dtype, except
# that vLLM v0.32.0 downcasts a float32 checkpoint to 16 bits (vllm/config/model.py,
# _resolve_auto_dtype): 2 bytes either way.
BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "auto": 2.0}
QUANT_BYTES = {"fp8": 1.0, "awq": 0.5, "gptq": 0.5}
# Bytes per cached element at each `kv_cache_dtype` the portal offers ("auto": the engine's dtype).
KV_CACHE_BYTES = {"float16": 2.0, "bfloat16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}
# Checkpoint dtypes (config.json torch_dtype) and their bytes, to tell whether the checkpoint's
# size is what the engine holds.
CHECKPOINT_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
THIN_HEADROOM = 0.10


@dataclass(frozen=True)
class MemoryFit:
    """The estimate and its verdict: fits / thin / does_not_fit / unknown. Sizes are per GPU."""

    verdict: str
    budget_gib: float
    weights_gib: float | None
    kv_gib: float | None  # the KV cache of one max-length sequence
    total_gib: float | None
    headroom_gib: float | None
    message: str
    kv_cache_dtype: str | None = None  # what the cache holds: "bfloat16", "fp8", ...
    kv_bytes_per_token: int | None = None  # per GPU (its share of layers and KV heads)
    kv_tokens: int | None = None  # KV capacity left after the weights, in tokens

    def as_dict(self) -> dict:
        return asdict(self)


def weight_bytes(
    facts: ModelFacts | None, *, parameter_count_b: float | None, dtype: str, quantization: str
) -> float | None:
    """The bytes of the whole model's weights on the GPUs, or None when nothing says.

    A parameter count the user gave wins; otherwise the checkpoint's own size when the engine holds
    it as stored (no quantization asked for, same width as `dtype`), else parameters × the bytes of
    the quantization or dtype.
    """
    engine_bytes = BYTES_PER_PARAM.get(dtype, 2.0)
    per_param = QUANT_BYTES.get(quantization or "", engine_bytes)
    if parameter_count_b:
        return parameter_count_b * 1e9 * per_param
    if facts is None:
        return None
    stored = CHECKPOINT_BYTES.get(facts.dtype or "")
    if facts.weight_bytes is not None and not quantization and stored in (None, engine_bytes):
        return float(facts.weight_bytes)
    parameters = facts.parameters
    if parameters is None and facts.weight_bytes is not None and stored:
        parameters = facts.weight_bytes / stored
    return None if parameters is None else parameters * per_param


def kv_element_bytes(*, kv_cache_dtype: str, dtype: str) -> float:
    """Bytes per cached element: the KV-cache dtype's, or under "auto" the engine's dtype."""
    return KV_CACHE_BYTES.get(kv_cache_dtype or "auto", BYTES_PER_PARAM.get(dtype, 2.0))


def kv_bytes_per_token(facts: ModelFacts, *, element_bytes: float, tp: int, pp: int) -> float | None:
    """KV-cache bytes one token takes on one GPU, as vLLM v0.32.0 lays the cache out: each pipeline
    stage caches its own layers (the widest stage counts); each tensor-parallel rank caches
    `max(1, kv_heads // tp)` heads, K and V (vllm/config/model.py, get_num_kv_heads); a
    latent-attention cache (`kv_elements_per_token`) is whole on every rank (MLA: one head)."""
    if facts.layers is None and facts.kv_elements_per_token is None:
        return None
    stage_share = math.ceil(facts.layers / pp) / facts.layers if facts.layers else 1 / pp
    if facts.kv_elements_per_token is not None:
        return facts.kv_elements_per_token * stage_share * element_bytes
    if facts.kv_heads is None or facts.head_dim is None:
        return None
    per_rank_heads = max(1, facts.kv_heads // tp)
    return math.ceil(facts.layers / pp) * per_rank_heads * facts.head_dim * 2 * element_bytes


def engine_kv_cache(backend: str) -> FixedKvCache | None:
    """The KV cache backend `backend`'s engine is given outright, or None where vLLM sizes it from
    the GPU memory budget (an unknown name: None, the GPU rule)."""
    if backend not in backend_names():
        return None
    given = backend_traits(backend).fixed_kv_cache
    return given() if given is not None else None


def fixed_kv_tokens(cache: FixedKvCache, per_token: float) -> int:
    """Tokens a fixed cache holds, as vLLM v0.32.0 counts them: `bytes // bytes_per_block` blocks
    (vllm/v1/core/kv_cache_utils.py, get_kv_cache_config_from_groups; a block is `block_size`
    tokens on every layer of the stage, `_get_kv_cache_bytes_per_block`), times the block size
    (`num_gpu_blocks × block_size`, what `cache_config_info` reports)."""
    return cache.bytes // math.ceil(per_token * cache.block_size) * cache.block_size


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
    kv_cache_dtype: str = "auto",
    backend: str = "",
) -> MemoryFit:
    """Estimate per-GPU memory for a draft; unknown models without a parameter count get
    'unknown' (weights-free) rather than a guess. Given its `backend`, an engine with a fixed KV
    cache is sized by that cache (`engine_kv_cache`)."""
    fixed = engine_kv_cache(backend) if backend else None
    if fixed is not None:  # the engine runs its own shape, whatever the draft asks (one CPU process)
        tensor_parallel_size, pipeline_parallel_size = fixed.tensor_parallel_size, fixed.pipeline_parallel_size
    tp, pp = max(1, tensor_parallel_size), max(1, pipeline_parallel_size)
    budget = gpu_memory_gib * gpu_memory_utilization
    facts = facts_for(model_source)
    total_weights = weight_bytes(facts, parameter_count_b=parameter_count_b, dtype=dtype, quantization=quantization)
    if total_weights is None:
        return MemoryFit(
            "unknown",
            round(budget, 2),
            None,
            None,
            None,
            None,
            "Model not in the catalog: give its parameter count for a memory estimate.",
        )
    weights = total_weights / (tp * pp) / GIB
    element_bytes = kv_element_bytes(kv_cache_dtype=kv_cache_dtype, dtype=dtype)
    per_token = None if facts is None else kv_bytes_per_token(facts, element_bytes=element_bytes, tp=tp, pp=pp)
    seq = max_model_len or (facts.max_context if facts else None)
    kv = per_token * seq / GIB if per_token is not None and seq else None
    if per_token is None:
        kv_tokens = None
    elif fixed is not None:
        kv_tokens = fixed_kv_tokens(fixed, per_token)
    else:
        kv_tokens = max(0, math.floor((budget - weights) * GIB / per_token))
    total = weights + (kv or 0.0)
    headroom = budget - total
    numbers = dict(
        budget_gib=round(budget, 2),
        weights_gib=round(weights, 2),
        kv_gib=None if kv is None else round(kv, 2),
        total_gib=round(total, 2),
        headroom_gib=round(headroom, 2),
        kv_cache_dtype=_kv_dtype_name(kv_cache_dtype, dtype, facts),
        kv_bytes_per_token=None if per_token is None else round(per_token),
        kv_tokens=kv_tokens,
    )
    kv_note = "" if kv is not None else " (weights only: KV cache unknown for this model)"
    capacity = "" if kv_tokens is None else f" Room for about {kv_tokens:,} tokens of KV cache per replica"
    if capacity:
        capacity += "." if fixed is None else f" in the engine's fixed {fixed.bytes / GIB:g} GiB KV cache."
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
                f"for concurrent sequences in the KV cache.{capacity}"
            ),
            **numbers,
        )
    return MemoryFit(
        "fits", message=f"Fits: about {total:.1f} of {budget:.1f} GiB per GPU{kv_note}.{capacity}", **numbers
    )


def _kv_dtype_name(kv_cache_dtype: str, dtype: str, facts: ModelFacts | None) -> str:
    """The cache's dtype in words: the option, or under "auto" the dtype the engine runs in."""
    if kv_cache_dtype and kv_cache_dtype != "auto":
        return kv_cache_dtype
    if dtype and dtype != "auto":
        return dtype
    stored = facts.dtype if facts else None
    return stored if stored in ("bfloat16", "float16") else "16-bit"


def deployment_fit(dep) -> MemoryFit:
    """The estimate for a deployment row (the spec that runs), as the deployment page shows it."""
    return estimate(
        model_source=dep.model_source,
        parameter_count_b=dep.parameter_count_b,
        dtype=str(dep.dtype),
        quantization=str(dep.quantization or ""),
        kv_cache_dtype=str(dep.kv_cache_dtype),
        tensor_parallel_size=dep.tensor_parallel_size,
        pipeline_parallel_size=dep.pipeline_parallel_size,
        max_model_len=dep.max_model_len,
        gpu_memory_gib=dep.flavor.gpu_memory_gib,
        gpu_memory_utilization=dep.gpu_memory_utilization,
        backend=str(dep.backend),
    )
