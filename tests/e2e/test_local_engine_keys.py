"""End to end on a real engine: the local vLLM engine refuses calls without a key (401); a key
minted over the API opens it (200) — through the very curl snippet the detail page shows, run by
bash with $API_KEY — and after revocation it is refused again (401), as is the key of a member the
tenant admin removes (a leaver); Try-it keeps working with the portal's own key throughout. Keys
change without a restart: the same engine process on the same port (the URL a snippet holds) from
the first 401 to the last. Real Celery worker (Redis), real vLLM CPU engine."""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import subprocess

import pytest
import requests

from tests.e2e.workers import local_cpu_model, request_and_approve_local
from tests.support.processes import celery_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.local_engine, pytest.mark.django_db(transaction=True)]
BODY = {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 4}


def engine_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def status_with(member, dep_id: int, key: str | None) -> int | None:
    """The status of a completion on the engine as it runs now (None while it restarts)."""
    detail = member.get(f"/api/v1/deployments/{dep_id}/").json()
    if detail["state"] != "ready" or not detail["endpoint_url"]:
        return None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        return requests.post(
            f"{detail['endpoint_url']}/completions", json=BODY, headers=headers, timeout=60
        ).status_code
    except requests.RequestException:
        return None


def curl_snippet(world, dep_id: int) -> str:
    """The curl snippet exactly as the detail page shows it (what a user copies)."""
    page = world.browser("member").get(f"/deployments/{dep_id}/").content.decode()
    return html.unescape(re.search(r'<pre class="snippet" id="snippet-curl"[^>]*>(.*?)</pre>', page, re.S).group(1))


@pytest.mark.skipif(not engine_available(), reason="needs the local extra: pip install '.[local]'")
def test_the_engine_takes_a_minted_key_and_refuses_it_once_revoked(tx_world, tmp_path, settings, local_runtime):
    model = local_cpu_model(tx_world, tmp_path, settings)
    # The portal's log view (this process) reads the engine log where the worker runs the engine:
    # local_runtime is this process's LOCAL_RUNTIME_DIR too.
    env = {
        "LOCAL_RUNTIME_DIR": str(local_runtime),
        "RECONCILE_REQUEUE_SECONDS": "3",
        "LOCAL_KVCACHE_GIB": "1",
        "LOCAL_MODEL_ROOT": str(tmp_path),
    }
    with celery_worker(tmp_path / "worker.log", env=env):
        dep_id = request_and_approve_local(tx_world, model, "tiny")
        member = tx_world.client("member")
        wait_for(lambda: status_with(member, dep_id, None) == 401, timeout=420, interval=2, what="a 401 without a key")
        state_file = local_runtime / str(dep_id) / "state.json"

        def same_engine(client=member) -> tuple[int, str]:
            """The engine's pid and the endpoint URL the portal shows."""
            url = client.get(f"/api/v1/deployments/{dep_id}/").json()["endpoint_url"]
            return json.loads(state_file.read_text())["pid"], url

        engine = same_engine()

        try_it = member.post(f"/api/v1/deployments/{dep_id}/try/", {"prompt": "Hi", "max_tokens": 4}, format="json")
        assert try_it.status_code == 200, try_it.content  # the portal's own key, never sent to the browser

        created = member.post("/api/v1/keys/", {"tenant": "alpha", "deployment": dep_id, "name": "e2e"}, format="json")
        assert created.status_code == 201, created.content
        key = created.json()["key"]
        kept = member.post("/api/v1/keys/", {"tenant": "alpha", "name": "ci"}, format="json")
        assert kept.status_code == 201, kept.content
        # The worker publishes the keys to the running engine's key file: no restart.
        wait_for(lambda: status_with(member, dep_id, key) == 200, timeout=60, interval=1, what="the key to work")
        wait_for(lambda: status_with(member, dep_id, kept.json()["key"]) == 200, timeout=60, interval=1, what="both")
        assert same_engine() == engine
        assert status_with(member, dep_id, "llmp_wrong") == 401
        # No member reads the key in the engine's log: not in the portal's view, and not in the
        # raw file either (the engine never had it as an argument, so vLLM could not print it).
        tails = member.get(f"/api/v1/deployments/{dep_id}/logs/?lines=2000").json()["tails"]
        shown = "".join(tail["text"] for tail in tails)
        raw = (local_runtime / str(dep_id) / "engine.log").read_text()
        assert "non-default args" in shown and "non-default args" in raw
        assert not [k for k in (key, kept.json()["key"]) if k in shown or k in raw]

        # The detail page's snippet, copied as is, run with the key in $API_KEY.
        snippet = curl_snippet(tx_world, dep_id)
        assert "$API_KEY" in snippet and member.get(f"/api/v1/deployments/{dep_id}/").json()["endpoint_url"] in snippet
        run = subprocess.run(
            ["bash", "-c", snippet + " --fail --silent --show-error --max-time 60"],
            env={**os.environ, "API_KEY": key},
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert run.returncode == 0 and '"choices"' in run.stdout, run.stderr

        revoked = member.post(f"/api/v1/keys/{created.json()['id']}/revoke/", {}, format="json")
        assert revoked.status_code == 200
        wait_for(lambda: status_with(member, dep_id, key) == 401, timeout=60, interval=1, what="the key to be refused")
        assert same_engine() == engine
        try_it = member.post(f"/api/v1/deployments/{dep_id}/try/", {"prompt": "Hi", "max_tokens": 4}, format="json")
        assert try_it.status_code == 200, try_it.content
        assert status_with(member, dep_id, kept.json()["key"]) == 200

        # A leaver: the tenant admin removes the member; their other key is refused by the engine
        # (portal.deprovision revokes it with the removal; the worker withdraws it from the key file).
        admin = tx_world.client("tenant_admin")
        assert admin.delete("/api/v1/tenants/alpha/members/alpha-member/").status_code == 204
        wait_for(
            lambda: status_with(admin, dep_id, kept.json()["key"]) == 401,
            timeout=420,
            interval=3,
            what="the leaver's key to be refused",
        )
        assert same_engine(admin) == engine

        stopped = admin.post(f"/api/v1/deployments/{dep_id}/stop/", {}, format="json")
        # A person's stop is recorded, and its GPUs released, at once (settle_gpus).
        assert stopped.status_code == 200, stopped.content
        assert (stopped.json()["state"], stopped.json()["reserved_gpus"]) == ("stopped", 0)
