"""The KV cache vLLM reported at start beside the portal's estimate of it, for the deployment page
and the API (one function, two callers).

The scrape cycle keeps what each engine stated in `vllm:cache_config_info` (ScrapeState.kv_cache,
written by metrics.collect from runtime.exposition.cacheinfo); the estimate is
deployments.sizing's `kv_tokens`, the tokens the GPU memory budget holds after the weights (on the
local backend: the tokens the engine's fixed VLLM_CPU_KVCACHE_SPACE cache holds, as vLLM counts them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from deployments import sizing
from deployments.models import ModelDeployment
from runtime.exposition.snapshot import Snapshot

# Beyond this gap between the two numbers the page says why they differ.
FAR_OFF_PCT = 25.0

BELOW = (
    "vLLM sizes its cache after a profiling run at start: it runs a forward pass of a full batch and "
    "keeps back the activations' peak, the memory for the CUDA graphs it captures, and the CUDA "
    "context and communication buffers; the estimate takes only the weights out of the budget."
)
ABOVE = (
    "The engine's cache was sized by a setting rather than by the GPU memory budget the estimate "
    "uses: a fixed KV cache size (--kv-cache-memory-bytes) or block count (--num-gpu-blocks-override)."
)

FIXED = (
    "This engine is given its cache outright (the local engine: VLLM_CPU_KVCACHE_SPACE) and the estimate "
    "counts it as vLLM does, so the engine ran with other settings than the portal's: another "
    "LOCAL_KVCACHE_GIB for the worker that started it, or a block count (--num-gpu-blocks-override)."
)


def reported(snapshot: Snapshot) -> list[dict[str, Any]]:
    """What a scrape read, as ScrapeState.kv_cache stores it: one entry per engine, in label order."""
    return [{"engine": dict(key), "tokens": tokens} for key, tokens in sorted(snapshot.kv_cache_tokens.items())]


def engine_name(labels: Mapping[str, str]) -> str:
    """An engine as the page names it: "engine 0", "replica 3f2a, engine 0", "pod p-1, engine 0"."""
    parts = []
    for label, word in (("pod", "pod"), ("ReplicaId", "replica"), ("WorkerId", "worker"), ("engine", "engine")):
        if labels.get(label):
            parts.append(f"{word} {labels[label]}")
    return ", ".join(parts) or "engine"


def _signed_pct(value: float) -> str:
    return ("+" if value >= 0 else "−") + f"{abs(value):.0f} %"


def kv_comparison(dep: ModelDeployment) -> dict[str, Any]:
    """The reported capacity (per engine and the smallest), the estimate, how far apart they are
    and, past FAR_OFF_PCT, why; `line` is the sentence the page shows."""
    fit = sizing.deployment_fit(dep)
    estimate = fit.kv_tokens
    state = getattr(dep, "scrape_state", None) if hasattr(dep, "scrape_state") else None
    engines = [
        {"engine": entry["engine"], "name": engine_name(entry["engine"]), "tokens": int(entry["tokens"])}
        for entry in (state.kv_cache if state is not None else [])
    ]
    tokens = min((e["tokens"] for e in engines), default=None)
    difference = None if tokens is None or not estimate else round((tokens - estimate) / estimate * 100, 1)
    far_off = difference is not None and abs(difference) > FAR_OFF_PCT
    return {
        "reported_tokens": tokens,
        "engines": engines,
        "reported_at": state.last_success if engines and state is not None else None,
        "estimate_tokens": estimate,
        "estimate": fit.as_dict(),  # the whole memory estimate the page's line quotes (dtype, bytes a token)
        "difference_pct": difference,
        "far_off": far_off,
        "why": "" if not far_off else _why(dep, difference),
        "line": _line(tokens, engines, estimate, difference),
    }


def _why(dep: ModelDeployment, difference: float) -> str:
    if sizing.engine_kv_cache(str(dep.backend)) is not None:
        return FIXED
    return BELOW if difference < 0 else ABOVE


def _line(tokens: int | None, engines: list[dict], estimate: int | None, difference: float | None) -> str:
    if tokens is None:
        if settings.PROMETHEUS_URL:
            return "vLLM has not reported its KV cache yet (the portal reads it only from the engines' own endpoints)."
        return "vLLM has not reported its KV cache yet."
    sizes = {e["tokens"] for e in engines}
    where = ""
    if len(engines) > 1:
        count = len(engines)
        where = f" per engine ({count} engines)" if len(sizes) == 1 else f" on the smallest of its {count} engines"
    compared = "no estimate" if estimate is None else f"estimate {estimate:,}"
    if difference is not None:
        compared += f", {_signed_pct(difference)}"
    return f"vLLM reports {tokens:,} tokens{where} ({compared})."
