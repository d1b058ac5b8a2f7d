"""runtime.exposition.cacheinfo against real vLLM 0.32 expositions (../shared/fixtures/metrics)."""

from __future__ import annotations

from runtime.exposition.cacheinfo import kv_cache_tokens
from tests.support.shared import shared_path


def fixture(name: str) -> str:
    return shared_path("fixtures", "metrics", name).read_text()


def test_the_capacity_vllm_reported_on_the_cpu_engine():
    # --num-gpu-blocks-override 24 --block-size 32: 768 tokens, as kv_cache_size_tokens says.
    assert kv_cache_tokens(fixture("vllm-0.32-cpu-openai-server-after-load.prom")) == 768
    assert kv_cache_tokens(fixture("vllm-0.32-cpu-openai-server-under-load.prom")) == 768


def test_blocks_times_block_size_when_the_token_label_is_absent():
    line = 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0\n'
    assert kv_cache_tokens(line) == 16000


def test_the_smallest_engine_and_the_ray_dialect():
    text = (
        'ray_vllm_cache_config_info{ReplicaId="a",block_size="16",kv_cache_size_tokens="5000"} 1.0\n'
        'ray_vllm_cache_config_info{ReplicaId="b",block_size="16",kv_cache_size_tokens="4800"} 1.0\n'
    )
    assert kv_cache_tokens(text) == 4800


def test_nothing_reported_is_none():
    assert kv_cache_tokens(fixture("ray-serve-llm-vllm-0.32-cpu.prom")) is None  # the captured Ray exposition has none
    assert kv_cache_tokens('vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n') is None
    assert kv_cache_tokens('vllm:cache_config_info{block_size="16" 1.0\n') is None  # unparseable
