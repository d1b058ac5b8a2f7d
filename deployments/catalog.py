"""Well-known models and the architecture numbers the GPU-memory estimate needs.

Figures are from each model's published config (parameters, layers, KV heads, head dim).
For mixture-of-experts models every expert's weights must be resident, so the full parameter
count is used, not the active one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelInfo:
    """Architecture facts for the memory estimate."""

    hf_id: str
    parameters_b: float  # billions of parameters (all experts for MoE)
    layers: int
    kv_heads: int
    head_dim: int
    max_context: int
    kv_bytes_per_token: int | None = None  # overrides the GQA formula (e.g. MLA latent cache)

    def kv_bytes_per_token_at(self, kv_dtype_bytes: float) -> float:
        if self.kv_bytes_per_token is not None:
            return float(self.kv_bytes_per_token)
        # K and V per layer: kv_heads × head_dim values each.
        return self.layers * self.kv_heads * self.head_dim * 2 * kv_dtype_bytes


CATALOG: dict[str, ModelInfo] = {
    m.hf_id.lower(): m
    for m in [
        ModelInfo("meta-llama/Meta-Llama-3-8B-Instruct", 8.03, 32, 8, 128, 8192),
        ModelInfo("meta-llama/Llama-3.1-8B-Instruct", 8.03, 32, 8, 128, 131072),
        ModelInfo("meta-llama/Meta-Llama-3-70B-Instruct", 70.6, 80, 8, 128, 8192),
        ModelInfo("meta-llama/Llama-3.1-70B-Instruct", 70.6, 80, 8, 128, 131072),
        ModelInfo("mistralai/Mixtral-8x22B-Instruct-v0.1", 141.0, 56, 8, 128, 65536),
        ModelInfo("mistralai/Mistral-7B-Instruct-v0.3", 7.25, 32, 8, 128, 32768),
        ModelInfo("Qwen/Qwen2.5-7B-Instruct", 7.62, 28, 4, 128, 32768),
        ModelInfo("Qwen/Qwen2.5-72B-Instruct", 72.7, 80, 8, 128, 32768),
        # DeepSeek-V3 caches a compressed latent (512 + 64 rope dims) per layer, 61 layers.
        ModelInfo("deepseek-ai/DeepSeek-V3", 671.0, 61, 1, 576, 163840, kv_bytes_per_token=61 * 576 * 2),
    ]
}


def lookup(model_source: str) -> ModelInfo | None:
    """The catalog entry for a Hugging Face id (case-insensitive), or None."""
    return CATALOG.get(model_source.strip().lower())
