"""End to end on a real engine, an embedding deployment (issue 33): a platform admin adds the
locally generated tiny model to the catalog as an embedding model, a member requests it from the
catalog on the local backend (vLLM's OpenAI server), an admin approves it and a real Celery worker
starts the engine with vLLM's pooling runner (runtime.tasks: --runner pooling --convert embed).
The curl snippet the deployment page shows, run by bash with a minted key in $API_KEY, gets one
vector as long as the model's hidden size; the Try-it box (page and API) says the same number of
dimensions; and the engine has no generation routes, so a chat completion is refused."""

from __future__ import annotations

import html
import importlib.util
import json
import math
import os
import re
import subprocess

import pytest
import requests

from deployments import endpoint
from deployments.models import ModelDeployment
from tests.e2e.workers import local_cpu_model
from tests.support.processes import celery_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.local_engine, pytest.mark.django_db(transaction=True)]
CATALOG = "/api/v1/catalog/models/"
NAME = "tiny-embed"


def engine_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def embeds_with(url: str, key: str) -> int | None:
    """The status of an embedding request with `key` (None while the engine does not answer)."""
    try:
        return requests.post(
            f"{url}/embeddings",
            json={"model": NAME, "input": "Hello"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        ).status_code
    except requests.RequestException:
        return None


def page_snippet(world, dep_id: int) -> str:
    """The curl snippet exactly as the detail page shows it (what a user copies)."""
    page = world.browser("member").get(f"/deployments/{dep_id}/").content.decode()
    found = re.search(r'<pre class="snippet" id="snippet-curl"[^>]*>(.*?)</pre>', page, re.S)
    assert found, "the page shows no curl snippet"
    return html.unescape(found.group(1))


@pytest.mark.skipif(not engine_available(), reason="needs the local extra: pip install '.[local]'")
def test_an_embedding_deployment_answers_the_snippet_with_one_vector(tx_world, tmp_path, settings, local_runtime):
    model = local_cpu_model(tx_world, tmp_path, settings)
    hidden_size = json.loads((model / "config.json").read_text())["hidden_size"]
    admin, member = tx_world.client("platform_admin"), tx_world.client("member")
    row = {"name": NAME, "display_name": "Tiny embedder", "source": str(model), "task": "embedding"}
    added = admin.post(CATALOG, row, format="json")
    assert added.status_code == 201, added.content
    assert added.json()["task"] == "embedding"

    with celery_worker(
        tmp_path / "worker.log",
        env={
            "LOCAL_RUNTIME_DIR": str(local_runtime),
            "RECONCILE_REQUEUE_SECONDS": "2",
            "LOCAL_KVCACHE_GIB": "1",
            "LOCAL_MODEL_ROOT": str(tmp_path),
        },
    ):
        # The catalog row fills the source and the task (catalog.drafts); the local backend's
        # default engine is vLLM's OpenAI server.
        created = member.post(
            "/api/v1/deployments/",
            {
                "tenant": "alpha",
                "name": "tiny-embed",
                "catalog_model": NAME,
                "served_model_name": NAME,
                "flavor": "cpu-local",
                "backend": "local",
                "max_model_len": 256,
                "dtype": "bfloat16",
            },
            format="json",
        )
        assert created.status_code == 201, created.content
        dep_id = created.json()["id"]
        assert (created.json()["task"], created.json()["model_source"]) == ("embedding", str(model))
        assert admin.post(f"/api/v1/deployments/{dep_id}/approve/", {"revision": 1}, format="json").status_code == 200
        body = wait_for(
            lambda: (d := member.get(f"/api/v1/deployments/{dep_id}/").json())["state"] in ("ready", "failed") and d,
            timeout=420,
            interval=1,
            what="the local engine to come up",
        )
        assert body["state"] == "ready", body["status_message"]
        url = body["endpoint_url"]
        argv = json.loads((local_runtime / str(dep_id) / "state.json").read_text())["argv"]
        flags = dict(zip(argv, argv[1:], strict=False))
        assert (flags["--runner"], flags["--convert"]) == ("pooling", "embed"), argv  # runtime.tasks

        created = member.post("/api/v1/keys/", {"tenant": "alpha", "deployment": dep_id, "name": "e2e"}, format="json")
        assert created.status_code == 201, created.content
        key = created.json()["key"]
        # The worker publishes the key to the running engine's key file (no restart).
        wait_for(lambda: embeds_with(url, key) == 200, timeout=60, interval=0.5, what="the key to work")

        # The page's snippet is the one the portal builds for the task, and calls /embeddings.
        snippet = page_snippet(tx_world, dep_id)
        assert snippet == endpoint.snippets(ModelDeployment.objects.get(pk=dep_id))["curl"]
        assert snippet.startswith(f"curl {url}/embeddings ") and "$API_KEY" in snippet
        run = subprocess.run(
            ["bash", "-c", snippet + " --fail --silent --show-error --max-time 60"],
            env={**os.environ, "API_KEY": key},
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert run.returncode == 0, run.stderr
        answer = json.loads(run.stdout)
        assert answer["object"] == "list" and len(answer["data"]) == 1, answer
        vector = answer["data"][0]["embedding"]
        assert len(vector) == hidden_size
        assert all(isinstance(value, float) and math.isfinite(value) for value in vector)
        assert answer["usage"]["prompt_tokens"] > 0

        # Try-it, on the page (htmx fragment) and over the API: the portal's own key, same vector size.
        fragment = tx_world.browser("member").post(f"/deployments/{dep_id}/try/", {"prompt": "Hello"})
        assert fragment.status_code == 200
        shown = html.unescape(fragment.content.decode())
        assert 'data-try="ok"' in shown and f"{hidden_size} dimensions: [" in shown, shown
        tried = member.post(f"/api/v1/deployments/{dep_id}/try/", {"prompt": "Hello"}, format="json")
        assert tried.status_code == 200, tried.content
        assert tried.json()["dimensions"] == hidden_size and tried.json()["tokens"] > 0, tried.json()

        # A pooling engine serves no generation: vLLM 0.32 mounts the generate routers (chat,
        # completions) only when "generate" is a supported task
        # (vllm/entrypoints/launchers/api_server/routers.py), so there is no such route: 404.
        chat = requests.post(
            f"{url}/chat/completions",
            json={"model": NAME, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert chat.status_code == 404, chat.text
