"""What a deployment serves its model for, and what that means to the engine: the one place.

A task is chat, completion, embedding or score (rerank). Chat and completion run vLLM's generate
runner; embedding and score run its pooling runner, which has no decode loop: no output tokens,
no tokens per second of generation, no time per output token. What the catalog offers
(catalog.choices.Task), what the request form and API take, the engine flags of every backend,
the endpoint path the snippets and the Try-it box call, and the dashboard's charts all read here.

vLLM 0.32 (vllm/config/model.py, ModelConfig.runner / .convert, `_get_convert_type`): `--runner
pooling` serves a pooling model as it is; `--convert embed` turns a generative architecture
(*ForCausalLM) into an embedding model (vllm/model_executor/models/adapters.py,
`as_embedding_model`, which leaves a model that already pools unchanged). For score, `--convert`
stays at auto: a *ForSequenceClassification cross-encoder classifies, anything else embeds and
scores by cosine. vLLM's OpenAI server mounts /v1/embeddings and /v1/score (and /v1/rerank)
for a pooling model (vllm/entrypoints/pooling/*/api_router.py); Ray Serve LLM 2.60's ingress
mounts /v1/embeddings and /v1/score (ray/llm/_internal/serve/core/ingress/ingress.py,
DEFAULT_ENDPOINTS), so /v1/score is the score path both serve.

Chunked prefill is left to vLLM for a pooling model: it supports it only for causal attention
with last-token pooling (ModelConfig.is_chunked_prefill_supported), so the flag is not sent.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskFacts:
    label: str
    runner: str  # vLLM --runner: "generate" or "pooling"
    convert: str | None  # vLLM --convert when it must be said (None: vLLM's "auto")
    path: str  # the OpenAI path under the endpoint's /v1 base
    generates: bool  # whether it produces output tokens (decode, tokens/s, TPOT)


CHAT = "chat"
COMPLETION = "completion"
EMBEDDING = "embedding"
SCORE = "score"

TASKS: dict[str, TaskFacts] = {
    CHAT: TaskFacts("Chat", "generate", None, "/chat/completions", True),
    COMPLETION: TaskFacts("Completion", "generate", None, "/completions", True),
    EMBEDDING: TaskFacts("Embedding", "pooling", "embed", "/embeddings", False),
    SCORE: TaskFacts("Rerank / score", "pooling", None, "/score", False),
}
DEFAULT = CHAT


def task_facts(task: str) -> TaskFacts:
    """The facts of `task` (a known one; an unknown name is a programming error: KeyError)."""
    return TASKS[task]


def generates(task: str) -> bool:
    return TASKS[task].generates


def engine_kwargs(task: str) -> dict[str, str]:
    """vLLM engine arguments for `task` beyond the defaults (none for the generate runner, so what a
    chat deployment renders is what it rendered before tasks existed)."""
    facts = TASKS[task]
    if facts.runner == "generate":
        return {}
    return {"runner": facts.runner} | ({"convert": facts.convert} if facts.convert else {})


def engine_flags(task: str) -> list[str]:
    """`engine_kwargs(task)` as vLLM's OpenAI server flags (--runner=pooling ...)."""
    return [f"--{key}={value}" for key, value in engine_kwargs(task).items()]


def pools(task: str) -> bool:
    return TASKS[task].runner == "pooling"
