"""deployments.sizing against hand calculations: weights from the model's facts, the KV cache from
layers × KV heads × head dim × the KV-cache dtype, split as vLLM v0.32.0 splits it over TP and PP,
and the KV capacity in tokens left after the weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deployments import catalog, sizing
from runtime.modelfacts import ModelFacts, read_model_dir
from tests.support.model_dirs import LLAMA3_8B, write_config, write_safetensors

# facts_for asks the catalog's rows first (the lookup deployments.apps registers): a database read.
pytestmark = pytest.mark.django_db

GIB = 1024**3
BUDGET = 72 * GIB  # 80 GiB × 0.9


def fit(model: str = "meta-llama/Llama-3.1-8B-Instruct", **changes) -> sizing.MemoryFit:
    args = dict(
        model_source=model,
        parameter_count_b=None,
        dtype="bfloat16",
        quantization="",
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        max_model_len=8192,
        gpu_memory_gib=80,
        gpu_memory_utilization=0.9,
    )
    return sizing.estimate(**(args | changes))


class TestByHand:
    def test_a_16_bit_gqa_model(self):
        memory = fit()
        # 8.03e9 × 2 bytes of weights; 32 layers × 8 KV heads × 128 × (K, V) × 2 bytes a token.
        assert memory.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2 == 131072
        assert (memory.weights_gib, memory.kv_gib) == (round(16.06e9 / GIB, 2), 1.0)  # 8192 tokens = 1 GiB
        assert memory.kv_tokens == (BUDGET - 16_060_000_000) // 131072 == 467_295
        assert (memory.verdict, memory.kv_cache_dtype) == ("fits", "bfloat16")
        assert "Room for about 467,295 tokens of KV cache" in memory.message

    def test_fp8_weights_keep_a_16_bit_cache(self):
        """The bug this replaced: FP8 weights halved the KV estimate, but nothing tells vLLM to store
        the cache in FP8, so it keeps the model's dtype (vllm/config/cache.py, cache_dtype "auto")."""
        memory = fit(quantization="fp8")
        assert memory.weights_gib == round(8.03e9 / GIB, 2)
        assert memory.kv_bytes_per_token == 131072 and memory.kv_gib == 1.0
        assert memory.kv_tokens == (BUDGET - 8_030_000_000) // 131072 == 528_559

    @pytest.mark.parametrize("kv_dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
    def test_an_fp8_cache_halves_the_bytes_a_token_takes(self, kv_dtype: str):
        memory = fit(quantization="fp8", kv_cache_dtype=kv_dtype)
        assert (memory.kv_bytes_per_token, memory.kv_gib, memory.kv_cache_dtype) == (65536, 0.5, kv_dtype)
        assert memory.kv_tokens == (BUDGET - 8_030_000_000) // 65536 == 1_057_119

    def test_float32_doubles_weights_and_an_auto_cache(self):
        memory = fit(dtype="float32")
        assert memory.kv_bytes_per_token == 262144 and memory.weights_gib == round(32.12e9 / GIB, 2)
        assert fit(dtype="float32", kv_cache_dtype="bfloat16").kv_bytes_per_token == 131072

    def test_tensor_parallel_splits_kv_heads_and_pipeline_splits_layers(self):
        # Llama-3-70B: 80 layers, 8 KV heads. TP 2 → 4 heads a rank; PP 2 → 40 layers a stage.
        memory = fit("meta-llama/Meta-Llama-3-70B-Instruct", tensor_parallel_size=2, pipeline_parallel_size=2)
        assert memory.kv_bytes_per_token == 40 * 4 * 128 * 2 * 2
        assert memory.weights_gib == round(70.6e9 * 2 / 4 / GIB, 2)

    def test_fewer_kv_heads_than_tp_ranks_are_replicated(self):
        # Qwen2.5-7B has 4 KV heads; at TP 8 each rank still holds one (vllm/config/model.py).
        assert fit("Qwen/Qwen2.5-7B-Instruct", tensor_parallel_size=8).kv_bytes_per_token == 28 * 1 * 128 * 2 * 2

    def test_a_latent_cache_is_whole_on_every_tp_rank_and_split_by_stage(self):
        tp8 = fit("deepseek-ai/DeepSeek-V3", tensor_parallel_size=8, quantization="fp8", max_model_len=4096)
        assert tp8.kv_bytes_per_token == 61 * 576 * 2  # no K/V pair, no TP split
        pp2 = fit("deepseek-ai/DeepSeek-V3", tensor_parallel_size=8, pipeline_parallel_size=2, max_model_len=4096)
        assert pp2.kv_bytes_per_token == 31 * 576 * 2  # the wider stage: ceil(61 / 2) layers

    def test_no_room_left_is_zero_tokens_and_does_not_fit(self):
        memory = fit("meta-llama/Meta-Llama-3-70B-Instruct")
        assert (memory.verdict, memory.kv_tokens) == ("does_not_fit", 0)

    def test_the_model_context_sizes_the_sequence_when_no_length_is_given(self):
        assert fit(max_model_len=None).kv_gib == 16.0  # 131072 tokens × 131072 bytes

    def test_an_unknown_model_needs_a_parameter_count_and_then_sizes_weights_only(self):
        assert fit("someone/unknown").verdict == "unknown"
        memory = fit("someone/unknown", parameter_count_b=7.0)
        assert (memory.weights_gib, memory.kv_gib, memory.kv_tokens) == (round(14e9 / GIB, 2), None, None)
        assert "weights only" in memory.message


class TestWeightsFromFacts:
    FACTS = ModelFacts(
        parameters=1_000_000, weight_bytes=2_000_123, dtype="bfloat16", layers=2, kv_heads=2, head_dim=64
    )

    def weights(self, facts=FACTS, *, count=None, dtype="auto", quantization=""):
        return sizing.weight_bytes(facts, parameter_count_b=count, dtype=dtype, quantization=quantization)

    def test_the_checkpoint_size_when_the_engine_holds_it_as_stored(self):
        assert self.weights() == 2_000_123 and self.weights(dtype="float16") == 2_000_123

    def test_parameters_times_bytes_when_the_engine_changes_the_width(self):
        assert self.weights(dtype="float32") == 4_000_000
        assert (self.weights(quantization="fp8"), self.weights(quantization="awq")) == (1_000_000, 500_000)

    def test_a_float32_checkpoint_runs_in_16_bits_under_auto(self):
        facts = ModelFacts(parameters=1_000_000, weight_bytes=4_000_000, dtype="float32")
        assert self.weights(facts) == 2_000_000

    def test_an_index_without_parameters_is_divided_by_the_checkpoint_dtype(self):
        facts = ModelFacts(weight_bytes=4_000_000, dtype="float32")
        assert self.weights(facts, quantization="fp8") == 1_000_000

    def test_a_count_the_user_gave_wins(self):
        assert self.weights(count=0.5) == 1e9


class TestLookups:
    @pytest.fixture
    def lookups(self, monkeypatch):
        monkeypatch.setattr(catalog, "_LOOKUPS", list(catalog._LOOKUPS))

    def test_the_built_in_models_are_case_insensitive(self):
        assert catalog.facts_for(" META-LLAMA/Llama-3.1-8B-Instruct ").layers == 32
        assert catalog.facts_for("nobody/nothing") is None

    def test_a_registered_lookup_is_asked_first_and_feeds_the_estimate(self, tmp_path: Path, lookups):
        model = write_config(tmp_path / "m", LLAMA3_8B)
        data = write_safetensors(model / "model.safetensors", {"w": ("BF16", [1000, 1000])})
        (model / "config.json").write_text(json.dumps({**LLAMA3_8B, "num_hidden_layers": 2}))

        def local_dir(source: str) -> ModelFacts | None:
            return read_model_dir(Path(source)) if source.startswith("/") else None

        catalog.register_lookup(local_dir)
        catalog.register_lookup(local_dir)  # twice: still asked once
        assert catalog._LOOKUPS.count(local_dir) == 1
        memory = fit(str(model))
        assert memory.weights_gib == round(data / GIB, 2)
        assert memory.kv_bytes_per_token == 2 * 8 * 128 * 2 * 2
        assert fit("meta-llama/Llama-3.1-8B-Instruct").kv_bytes_per_token == 131072  # the built-ins still answer


@pytest.fixture
def row_source(tmp_path: Path, settings, django_user_model):
    """Makes a catalog row for a model directory written on the spot (config.json and a BF16
    safetensors file of `elements`) and imports its facts as an admin does; returns its source."""
    from catalog.models import CatalogModel
    from catalog.permissions import Standing
    from catalog.services import catalog_model_import_facts

    settings.LOCAL_MODEL_ROOT = str(tmp_path)
    admin = django_user_model.objects.create(username="catalog-admin")

    def make(name: str, config: dict, elements: int) -> str:
        directory = write_config(tmp_path / name, config)
        write_safetensors(directory / "model.safetensors", {"w": ("BF16", [elements])})
        row = CatalogModel.objects.create(name=name, display_name=name, source=str(directory))
        catalog_model_import_facts(row_id=row.pk, actor=admin, standing=Standing.PLATFORM_ADMIN)
        return str(directory)

    return make


class TestCatalogRows:
    """Models as the catalog holds them: a row whose facts were imported from its config.json and
    safetensors headers (catalog.services.catalog_model_import_facts), read by the lookup the
    deployments app registers (deployments.apps.catalog_row_facts), not by a lookup of the test's."""

    def test_a_llama_3_8b_row(self, row_source):
        source = row_source("llama-3-8b", LLAMA3_8B, 8_030_261_248)
        memory = fit(source)
        # Weights: the checkpoint as stored, 8,030,261,248 BF16 elements = 16,060,522,496 bytes.
        # A token: 32 layers × 8 KV heads × head dim 4096 / 32 = 128 × (K, V) × 2 bytes = 131,072.
        assert memory.weights_gib == round(16_060_522_496 / GIB, 2)
        assert memory.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2 == 131072
        # Capacity: (80 GiB × 0.9 − the weights) / 131,072 = 61,248,888,832 / 131,072 = 467,291.9.
        assert memory.kv_tokens == (BUDGET - 16_060_522_496) // 131072 == 467_291
        assert memory.kv_gib == 1.0  # max_model_len 8192 × 131,072 bytes = 1 GiB

    def test_a_multi_query_row_keeps_its_one_kv_head_on_every_tp_rank(self, row_source):
        mqa = {**LLAMA3_8B, "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 1}
        source = row_source("mqa-3b", {**mqa, "num_hidden_layers": 24}, 1_500_000_000)
        memory = fit(source, tensor_parallel_size=2)
        # A token: 24 layers × max(1, 1 // 2) = 1 KV head × head dim 2048 / 16 = 128 × 2 × 2 bytes.
        assert memory.kv_bytes_per_token == 24 * 1 * 128 * 2 * 2 == 12288
        # Each of the 2 ranks holds half of 1.5e9 × 2 bytes: (72 GiB − 1.5e9 bytes) / 12,288.
        assert memory.weights_gib == round(1.5e9 / GIB, 2)
        assert memory.kv_tokens == (BUDGET - 1_500_000_000) // 12288 == 6_169_385


class TestAFixedKvCache:
    """The local backend's engine (vLLM's CPU build) is given VLLM_CPU_KVCACHE_SPACE = LOCAL_KVCACHE_GIB
    GiB for its cache, in blocks of 32 tokens, on one rank (runtime.backends.local.engine.kv_cache);
    vLLM makes `bytes // (block_size × bytes a token)` blocks of it (vllm-cpu 0.32.0,
    vllm/v1/core/kv_cache_utils.py), whatever the flavor's memory and the weights."""

    def test_the_tiny_model_in_one_gib(self, settings, row_source):
        from deployments.management.commands.make_tiny_model import MODEL_SHAPE

        settings.LOCAL_KVCACHE_GIB = 1
        config = {**LLAMA3_8B, **MODEL_SHAPE}  # make_tiny_model's shape: 2 layers, 2 KV heads, 256 / 4 = 64
        memory = fit(row_source("tiny-llama", config, 1_000_000), backend="local", max_model_len=256)
        # A token: 2 layers × 2 KV heads × 64 × 2 × 2 bytes = 1,024; a block of 32: 32,768 bytes;
        # 2^30 // 32,768 = 32,768 blocks × 32 = 1,048,576 tokens.
        assert memory.kv_bytes_per_token == 2 * 2 * 64 * 2 * 2 == 1024
        assert memory.kv_tokens == 2**30 // (1024 * 32) * 32 == 1_048_576
        assert "1,048,576 tokens of KV cache per replica in the engine's fixed 1 GiB KV cache" in memory.message

    def test_the_engine_runs_one_rank_whatever_the_draft_asks(self, settings):
        settings.LOCAL_KVCACHE_GIB = 3
        memory = fit(backend="local", tensor_parallel_size=4, gpu_memory_gib=4)
        # Llama-3.1-8B whole on one rank: 131,072 bytes a token, 4 MiB a block; 3 GiB = 768 blocks.
        assert memory.kv_bytes_per_token == 131072
        assert memory.kv_tokens == 3 * 2**30 // (131072 * 32) * 32 == 24_576

    def test_capacity_is_whole_blocks(self, settings):
        settings.LOCAL_KVCACHE_GIB = 1
        memory = fit("Qwen/Qwen2.5-7B-Instruct", backend="local")
        # 28 layers × 4 KV heads × 128 × 2 × 2 = 57,344 bytes a token; a block 1,835,008 bytes;
        # 2^30 // 1,835,008 = 585 blocks = 18,720 tokens (not 2^30 // 57,344 = 18,724).
        assert memory.kv_bytes_per_token == 57344
        assert memory.kv_tokens == 585 * 32 == 18_720

    @pytest.mark.parametrize("backend", ["kuberay", "kserve", "", "no-such-backend"])
    def test_other_backends_keep_the_gpu_budget(self, backend):
        assert fit(backend=backend).kv_tokens == (BUDGET - 16_060_000_000) // 131072 == 467_295
