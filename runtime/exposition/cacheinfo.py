"""The KV cache vLLM itself allocated, from its `cache_config_info` gauge: the number the portal's
estimate (deployments.sizing, `kv_tokens`) is compared with.

vLLM exports its CacheConfig as the labels of `vllm:cache_config_info` (value 1), every field
str()-ed (vllm/config/cache.py, CacheConfig.metrics_info; vllm/v1/metrics/loggers.py,
PrometheusStatLogger.log_metrics_info, set once the engine has allocated its cache, one series per
engine index). In v0.32.0 `kv_cache_size_tokens` is the group-aware capacity, the same number as
the "KV cache size: N tokens" start-up line (vllm/v1/core/kv_cache_utils.py,
update_kv_cache_capacity); `num_gpu_blocks` × `block_size` is the fallback for engines that do not
set it (and is wrong only for hybrid models, whose requests span several cache groups). Under Ray
Serve the same gauge goes through Ray's metrics (RayPrometheusStatLogger, vllm/v1/metrics/
ray_wrappers.py) as `ray_vllm_cache_config_info`, with the replica's tags beside the config's.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

FAMILIES = ("vllm:cache_config_info", "ray_vllm_cache_config_info")
# The labels that say which engine a report is from (vLLM's engine index, Ray Serve's replica and
# worker, the target labels Prometheus adds). Every other label of the gauge is a CacheConfig field.
ENGINE_LABELS = ("namespace", "pod", "instance", "ReplicaId", "WorkerId", "model_name", "engine")


def _number(labels: Mapping[str, str], name: str) -> int | None:
    raw = labels.get(name, "")
    return int(raw) if raw.isdigit() else None  # "None" before the cache exists


def tokens_from_labels(labels: Mapping[str, str]) -> int | None:
    """The KV capacity in tokens one `cache_config_info` series states, or None when it states none."""
    tokens = _number(labels, "kv_cache_size_tokens")
    if tokens is None:
        blocks, size = _number(labels, "num_gpu_blocks"), _number(labels, "block_size")
        tokens = blocks * size if blocks is not None and size is not None else None
    return tokens


def engine_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The engine a `cache_config_info` series is from: its :data:`ENGINE_LABELS`, sorted."""
    return tuple(sorted((name, labels[name]) for name in ENGINE_LABELS if name in labels))


def kv_cache_tokens(text: str) -> int | None:
    """The KV capacity in tokens of one engine in the exposition `text` (the smallest, when it holds
    several engines or replicas), or None when no engine reports one. Only the info lines are
    parsed, so a large exposition costs a scan and no more."""
    lines = [line for line in text.splitlines() if line.startswith(FAMILIES)]
    found: list[int] = []
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for sample in family.samples:
                tokens = tokens_from_labels(sample.labels)
                if tokens is not None:
                    found.append(tokens)
    except ValueError:  # prometheus_client's every syntax error: nothing usable was reported
        return None
    return min(found) if found else None
