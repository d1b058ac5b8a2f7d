"""Issue 30, end to end in the browser on a real engine: a member edits a serving local
deployment (a change that needs approval), withdraws the change after the confirmation page,
and a client calling the endpoint all along sees no failure from before the edit to after the
withdrawal. Real Celery worker (Redis), real vLLM CPU engine, Debian's Chromium.

On 518dee8 the same edit moved the whole deployment to "pending approval" and the page offered
Cancel, which cancelled the deployment and stopped the endpoint two seconds later.
"""

from __future__ import annotations

import importlib.util
import threading
import time

import pytest
import requests

from deployments.choices import RevisionStatus
from deployments.models import ModelDeployment
from tests.browser.conftest import Portal
from tests.e2e.workers import local_cpu_model, request_and_approve_local
from tests.support.processes import celery_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.local_engine, pytest.mark.django_db(transaction=True)]
BODY = {"model": "tiny-llama", "prompt": "Hello", "max_tokens": 2}


def completion(url: str, key: str) -> int | str:
    try:
        return requests.post(
            f"{url}/completions", json=BODY, headers={"Authorization": f"Bearer {key}"}, timeout=60
        ).status_code
    except requests.RequestException as error:
        return type(error).__name__


class Caller(threading.Thread):
    """Calls the endpoint back to back until stopped; keeps every outcome."""

    def __init__(self, url: str, key: str):
        super().__init__(daemon=True)
        self.url, self.key, self.outcomes, self.halt = url, key, [], threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.outcomes.append(completion(self.url, self.key))
            time.sleep(0.2)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the local extra: pip install '.[local]'")
def test_editing_then_withdrawing_never_interrupts_the_endpoint(
    tx_world, live_server, chromium, tmp_path, settings, local_runtime
):
    model = local_cpu_model(tx_world, tmp_path, settings)
    env = {
        "LOCAL_RUNTIME_DIR": str(local_runtime),
        "RECONCILE_REQUEUE_SECONDS": "3",
        "LOCAL_KVCACHE_GIB": "1",
        "LOCAL_MODEL_ROOT": str(tmp_path),
    }
    portal = Portal(live_server.url, tx_world, chromium)
    try:
        with celery_worker(tmp_path / "worker.log", env=env):
            dep_id = request_and_approve_local(tx_world, model, "tiny")
            member = tx_world.client("member")
            key = member.post("/api/v1/keys/", {"tenant": "alpha", "deployment": dep_id, "name": "loop"}, format="json")
            assert key.status_code == 201, key.content
            key = key.json()["key"]
            detail = lambda: member.get(f"/api/v1/deployments/{dep_id}/").json()  # noqa: E731
            ok = lambda: detail()["state"] == "ready" and completion(detail()["endpoint_url"], key) == 200  # noqa: E731
            wait_for(ok, timeout=480, interval=3, what="the engine to answer with the key")
            caller = Caller(detail()["endpoint_url"], key)
            caller.start()
            wait_for(lambda: len(caller.outcomes) >= 3, timeout=120, what="calls before the edit")

            page = portal.page("member")
            page.goto(f"/deployments/{dep_id}/edit/")
            page.locator("#id_max_model_len").fill("128")
            page.get_by_role("button", name="Propose change").click()
            page.wait_for_url(f"**/deployments/{dep_id}/")
            proposal = page.locator("#proposed-change")
            row = proposal.locator("tr[data-field=max_model_len]")
            assert row.count() == 1, proposal.inner_text()
            assert "256" in row.inner_text() and "128" in row.inner_text()
            dep = ModelDeployment.objects.get(pk=dep_id)
            assert (dep.state, dep.max_model_len, dep.reserved_gpus) == ("ready", 256, 1)
            calls_while_waiting = len(caller.outcomes)
            wait_for(lambda: len(caller.outcomes) >= calls_while_waiting + 3, timeout=120, what="calls while it waits")

            proposal.get_by_role("button", name="Withdraw change").click()
            assert page.locator("#confirm-explanation").is_visible()  # asks before acting
            assert ModelDeployment.objects.get(pk=dep_id).revisions.get(number=2).status == RevisionStatus.PROPOSED
            page.locator("#confirm-form button[type=submit]").click()
            page.wait_for_url(f"**/deployments/{dep_id}/")
            assert page.locator("#proposed-change").count() == 0
            after = len(caller.outcomes)
            wait_for(lambda: len(caller.outcomes) >= after + 3, timeout=120, what="calls after the withdrawal")
            caller.halt.set()
            caller.join(timeout=90)

            dep = ModelDeployment.objects.get(pk=dep_id)
            assert dep.revisions.get(number=2).status == RevisionStatus.WITHDRAWN
            assert (dep.state, dep.serving_revision.number, dep.max_model_len) == ("ready", 1, 256)
            assert caller.outcomes and set(caller.outcomes) == {200}, caller.outcomes
    finally:
        portal.close()
