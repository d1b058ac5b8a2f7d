"""The "try it" box: one request sent through the portal to a deployment's OpenAI endpoint, the
one its task serves (runtime.tasks): a completion for chat and completion deployments, an
embedding for embedding ones, scores of documents against the prompt for score ones."""

from __future__ import annotations

import time

import requests
from django.conf import settings

from deployments.models import ModelDeployment
from runtime import tasks
from runtime.keys import portal_key

# The Try-it box's bounds (the form and the API's TrySerializer take these).
PROMPT_MAX = 2000
DOCUMENTS_MAX = 8  # lines a score request compares with the prompt
EMBEDDING_HEAD = 8  # leading values of a vector the result shows


def documents_of(text: str) -> list[str]:
    """The non-empty lines of a score request's documents field."""
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def input_problem(dep: ModelDeployment, documents: str) -> str | None:
    """Why this input cannot be tried on `dep` (a field error on `documents`), or None."""
    if dep.task == tasks.SCORE and not documents_of(documents):
        return "A score deployment compares the prompt with documents: give one or more, one per line."
    return None


def _request(dep: ModelDeployment, *, prompt: str, max_tokens: int, documents: list[str]) -> tuple[str, dict]:
    """The path under /v1 and the body for `dep`'s task."""
    model = dep.served_model_name or dep.name
    if dep.task == tasks.EMBEDDING:
        return tasks.task_facts(dep.task).path, {"model": model, "input": prompt}
    if dep.task == tasks.SCORE:
        return tasks.task_facts(dep.task).path, {"model": model, "text_1": prompt, "text_2": documents}
    # Chat deployments are tried with a plain completion too: it needs no chat template.
    return "/completions", {"model": model, "prompt": prompt, "max_tokens": max_tokens}


def _result(task: str, body: dict, documents: list[str]) -> dict:
    """What the box shows from an OpenAI-shaped answer (KeyError/TypeError/... when it is not one)."""
    tokens = (body.get("usage") or {}).get("completion_tokens" if tasks.generates(task) else "prompt_tokens")
    if task == tasks.EMBEDDING:
        vector = [float(value) for value in body["data"][0]["embedding"]]
        head = ", ".join(f"{value:.4f}" for value in vector[:EMBEDDING_HEAD])
        more = ", …" if len(vector) > EMBEDDING_HEAD else ""
        return {"text": f"{len(vector)} dimensions: [{head}{more}]", "tokens": tokens, "dimensions": len(vector)}
    if task == tasks.SCORE:
        scores = {int(item["index"]): float(item["score"]) for item in body["data"]}
        ranked = sorted(range(len(documents)), key=lambda i: -scores[i])
        text = "\n".join(f"{scores[i]:.4f}  {documents[i]}" for i in ranked)
        return {"text": text, "tokens": tokens, "scores": [scores[i] for i in range(len(documents))]}
    return {"text": body["choices"][0]["text"], "tokens": tokens}


def try_prompt(
    dep: ModelDeployment, *, prompt: str, max_tokens: int = 32, documents: str = "", timeout: float = 60.0
) -> dict:
    """Send one request to the deployment; returns text (and what the task adds), token count and
    latency, or an error."""
    if not dep.endpoint_url:
        return {"error": "This deployment has no endpoint yet."}
    if problem := input_problem(dep, documents):
        return {"error": problem}
    lines = documents_of(documents)
    path, payload = _request(dep, prompt=prompt, max_tokens=max_tokens, documents=lines[:DOCUMENTS_MAX])
    started = time.perf_counter()
    try:
        response = requests.post(
            dep.endpoint_url.rstrip("/") + path,
            timeout=timeout,
            # The portal's own key for this deployment (runtime.keys): accepted by the local engine
            # and by the Gateway's AuthPolicy, held server-side only.
            headers={"Authorization": f"Bearer {portal_key(settings.SECRET_KEY, dep.pk)}"},
            json=payload,
        )
        latency_ms = round((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        result = _result(dep.task, response.json(), lines[:DOCUMENTS_MAX])
    except requests.RequestException as error:
        return {"error": f"The endpoint did not answer: {type(error).__name__}: {str(error)[:300]}"}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        what = {tasks.EMBEDDING: "embedding", tasks.SCORE: "score"}.get(dep.task, "completion")
        return {"error": f"The endpoint answered with something that is not an OpenAI {what}."}
    return {**result, "latency_ms": latency_ms}
