"""Generate a tiny random-weight Llama model (HF format) for the local engine demo and tests.

No model hub is reachable here, so the demo and the slow end-to-end test serve a model made on
the spot: a byte-level BPE tokenizer trained on seeded, generated text, and a two-layer
`LlamaForCausalLM` with random weights sized so vLLM's CPU attention accepts it (head_dim 64,
KV blocks of 32 are the CPU backend's constraints). Same seed → byte-identical files.

torch, transformers and tokenizers come with the `[local]` extra; they are imported inside
`handle` so `manage.py help` works without them.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]
# Small enough to build in seconds and load in vLLM fast; head_dim = hidden / heads = 64.
MODEL_SHAPE: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
}
WORDS = (
    "the a model serves tokens quickly slowly every request queue quota tenant cluster GPU node "
    "replica engine cache prefix batch prompt answer question reads writes waits runs stops starts "
    "small large fast steady ready failed pending admitted evicted scaled metrics latency throughput"
).split()
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def corpus(seed: int, lines: int = 4000) -> list[str]:
    """Seeded pseudo-sentences: enough variety for BPE merges, no external data."""
    rng = random.Random(seed)
    text = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
        number = str(rng.randint(0, 9999))
        text.append(" ".join(words).capitalize() + f" {number}" + rng.choice([".", "?", "!", ","]))
    return text


def build_tokenizer(seed: int, vocab_size: int):
    """A byte-level BPE tokenizer (GPT-2 style, so any text round-trips) as a fast HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
        chat_template=CHAT_TEMPLATE,
    )


def build_model(seed: int, tokenizer):
    """A random-weight Llama whose vocabulary is exactly the tokenizer's."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        **MODEL_SHAPE,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model


class Command(BaseCommand):
    help = "Generate a tiny random-weight Llama model with a locally trained tokenizer (HF format)."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--output", type=Path, default=None, help="target directory (default: LOCAL_MODEL_ROOT/tiny-llama)"
        )
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--vocab-size", type=int, default=1024)

    def handle(self, *args, output: Path | None, seed: int, vocab_size: int, **options) -> None:
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as exc:
            raise CommandError(f"{exc.name} is missing: pip install '.[local]'") from exc
        target = Path(output or Path(settings.LOCAL_MODEL_ROOT) / "tiny-llama")
        started = time.monotonic()
        tokenizer = build_tokenizer(seed, vocab_size)
        model = build_model(seed, tokenizer)
        target.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(target)
        model.save_pretrained(target, safe_serialization=True)
        params = sum(p.numel() for p in model.parameters())
        (target / "portal-tiny-model.json").write_text(json.dumps({"seed": seed, "parameters": params}) + "\n")
        if options["verbosity"] > 0:
            self.stdout.write(
                self.style.SUCCESS(
                    f"tiny Llama ({params / 1e6:.2f}M parameters, vocab {len(tokenizer)}) written to {target} "
                    f"in {time.monotonic() - started:.1f}s"
                )
            )
