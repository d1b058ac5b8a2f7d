"""The "try it" box: one prompt sent through the portal to a deployment's OpenAI endpoint."""

from __future__ import annotations

import time

import requests
from django.conf import settings

from deployments.models import ModelDeployment
from runtime.keys import portal_key


def try_prompt(dep: ModelDeployment, *, prompt: str, max_tokens: int = 32, timeout: float = 60.0) -> dict:
    """POST /completions to the deployment; returns text, token count and latency, or an error."""
    if not dep.endpoint_url:
        return {"error": "This deployment has no endpoint yet."}
    started = time.perf_counter()
    try:
        response = requests.post(
            f"{dep.endpoint_url.rstrip('/')}/completions",
            timeout=timeout,
            # The portal's own key for this deployment (runtime.keys): accepted by the local engine
            # and by the Gateway's AuthPolicy, held server-side only.
            headers={"Authorization": f"Bearer {portal_key(settings.SECRET_KEY, dep.pk)}"},
            json={"model": dep.served_model_name or dep.name, "prompt": prompt, "max_tokens": max_tokens},
        )
        latency_ms = round((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        body = response.json()
        text = body["choices"][0]["text"]
        tokens = (body.get("usage") or {}).get("completion_tokens")
    except requests.RequestException as error:
        return {"error": f"The endpoint did not answer: {type(error).__name__}: {str(error)[:300]}"}
    except (ValueError, KeyError, IndexError, TypeError):
        return {"error": "The endpoint answered with something that is not an OpenAI completion."}
    return {"text": text, "tokens": tokens, "latency_ms": latency_ms}
