"""Where the sizing estimate finds a model's facts: `facts_for(model_source)`.

Lookups are tried in order, first answer wins. The built-in one holds well-known models' published
configs (parameters, layers, KV heads, head dim, context). A lookup of catalog rows (facts imported
from config.json) goes ahead of it with `register_lookup`; the catalog app sits below deployments in
the layers, so the registering is done from this side (this module or deployments' AppConfig.ready).
For mixture-of-experts models every expert's weights must be resident, so the full parameter count
is used, not the active one.
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.modelfacts import ModelFacts

Lookup = Callable[[str], ModelFacts | None]


def _known(parameters_b: float, layers: int, kv_heads: int, head_dim: int, max_context: int, **more) -> ModelFacts:
    return ModelFacts(
        parameters=round(parameters_b * 1e9),
        dtype="bfloat16",
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        max_context=max_context,
        **more,
    )


# Published Hugging Face id → facts.
KNOWN: dict[str, ModelFacts] = dict(
    [
        ("meta-llama/Meta-Llama-3-8B-Instruct", _known(8.03, 32, 8, 128, 8192)),
        ("meta-llama/Llama-3.1-8B-Instruct", _known(8.03, 32, 8, 128, 131072)),
        ("meta-llama/Meta-Llama-3-70B-Instruct", _known(70.6, 80, 8, 128, 8192)),
        ("meta-llama/Llama-3.1-70B-Instruct", _known(70.6, 80, 8, 128, 131072)),
        ("mistralai/Mixtral-8x22B-Instruct-v0.1", _known(141.0, 56, 8, 128, 65536)),
        ("mistralai/Mistral-7B-Instruct-v0.3", _known(7.25, 32, 8, 128, 32768)),
        ("Qwen/Qwen2.5-7B-Instruct", _known(7.62, 28, 4, 128, 32768)),
        ("Qwen/Qwen2.5-72B-Instruct", _known(72.7, 80, 8, 128, 32768)),
        # Multi-head latent attention: 61 layers each cache a 512-wide latent plus a 64-wide RoPE key
        # (kv_lora_rank + qk_rope_head_dim, runtime.modelfacts), not K and V per head. Heads and head
        # dim as read_model_dir reads its config.json (no head_dim there: 7168 / 128).
        (
            "deepseek-ai/DeepSeek-V3",
            _known(
                671.0, 61, 128, 56, 163840, hidden_size=7168, attention_heads=128, kv_elements_per_token=61 * (512 + 64)
            ),
        ),
    ]
)
CATALOG = KNOWN  # the name the profiles' tests walk every well-known model by
_KNOWN_FOLDED = {hf_id.lower(): facts for hf_id, facts in KNOWN.items()}


def known_model(model_source: str) -> ModelFacts | None:
    """The built-in facts for a Hugging Face id (case-insensitive), or None."""
    return _KNOWN_FOLDED.get(model_source.strip().lower())


_LOOKUPS: list[Lookup] = [known_model]


def register_lookup(lookup: Lookup) -> None:
    """Ask `lookup` before the lookups registered so far (the built-ins last). Registering the same
    function twice (an app's ready() run again) keeps one copy."""
    if lookup not in _LOOKUPS:
        _LOOKUPS.insert(0, lookup)


def facts_for(model_source: str) -> ModelFacts | None:
    """The facts of the model `model_source` names, from the first lookup that knows it."""
    for lookup in _LOOKUPS:
        if (facts := lookup(model_source)) is not None:
            return facts
    return None
