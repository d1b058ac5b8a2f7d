"""Wake on request on the local engine (issue 35's "done when"): a deployment the idle policy
stopped answers its next OpenAI request after a cold start within the client's timeout, and with
no quota left the same request gets a 503 with the reason.

The chain is the real one: the live portal (pytest-django's live server, the wake API), a real
Celery worker (Redis) running the local backend with its gateway, a vLLM CPU engine serving a
generated tiny Llama, the OpenAI Python client. The idle stop is the idle policy's own service
(`deployment_policy_stop` with its cause, as reclaim.idle's sweep calls it; the sweep's clock is
tests/reclaim/test_idle.py's business): a stopped deployment that never ran is as asleep as one
that did, and this way the machine starts one engine, not two.
"""

from __future__ import annotations

import importlib.util
import time

import pytest
import requests

from access.services import key_mint
from core.models import AuditEvent
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.policy_actions import IDLE_STOPPED, deployment_policy_stop
from deployments.wake import WAKE_REFUSED, WOKEN
from quotas.models import TenantQuota
from runtime.backends.local.gateway import GATEWAY_DIR, LocalGateway, port_open
from runtime.gateway_local import routes
from tests.e2e.workers import local_cpu_model, request_and_approve_local
from tests.support.processes import celery_worker, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.local_engine,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="needs the local extra: pip install '.[local]'"
    ),
]


def _asleep(root, dep_id: int) -> bool:
    route = routes.TableFile(root / GATEWAY_DIR / routes.ROUTES_FILE).current().routes.get(dep_id)
    return route is not None and route.asleep


def _idle_stop(dep_id: int) -> None:
    deployment_policy_stop(deployment_id=dep_id, reason="No tokens generated for 2.0 h (test).", cause=IDLE_STOPPED)


def test_an_idle_stopped_deployment_wakes_on_a_request_and_without_quota_says_why(
    tx_world, tmp_path, settings, local_runtime, live_server
):
    from openai import InternalServerError, OpenAI  # vLLM's dependency: here only with the [local] extra

    model = local_cpu_model(tx_world, tmp_path, settings)
    settings.LOCAL_GATEWAY = True  # the web side stores minted keys where the gateway reads them
    dep_id = request_and_approve_local(tx_world, model, "tiny")
    _idle_stop(dep_id)  # before any engine started: the worker's first reconcile finds it stopped
    key, plaintext = key_mint(user=tx_world.users["member"], tenant=tx_world.alpha, name="wake-key")
    env = {
        "LOCAL_RUNTIME_DIR": str(local_runtime),
        "LOCAL_GATEWAY": "1",
        "LOCAL_GATEWAY_PORTAL_URL": live_server.url,
        "RECONCILE_REQUEUE_SECONDS": "3",
        "LOCAL_KVCACHE_GIB": "1",
        "LOCAL_MODEL_ROOT": str(tmp_path),
    }
    with celery_worker(tmp_path / "worker.log", env=env):
        wait_for(lambda: _asleep(local_runtime, dep_id), timeout=120, interval=1, what="the gateway to hold it")
        base = LocalGateway(local_runtime).tenant_endpoint("alpha")
        wait_for(lambda: port_open(int(base.split(":")[2].split("/")[0])), timeout=60, what="the tenant's port")
        client = OpenAI(base_url=base, api_key=plaintext, timeout=600, max_retries=0)
        assert [m.id for m in client.models.list()] == ["tiny-llama"]  # listed while asleep, wakes nothing
        assert ModelDeployment.objects.get(pk=dep_id).state == "stopped"

        began = time.monotonic()
        answer = client.completions.create(
            model="tiny-llama", prompt="Wake up", max_tokens=4, extra_headers={"X-Wake-Timeout": "540"}
        )
        cold_start = time.monotonic() - began

        assert (answer.model, answer.usage.completion_tokens) == ("tiny-llama", 4)
        print(f"cold start through the activator: {cold_start:.1f} s")
        woke = DeploymentEvent.objects.get(deployment_id=dep_id, reason=WOKEN)
        assert (woke.from_state, woke.to_state) == ("stopped", "approved") and "'wake-key'" in woke.message
        entry = AuditEvent.objects.filter(action="deployment.start", object_id=str(dep_id)).get()
        assert (entry.actor_name, entry.changes["key_id"], entry.changes["cause"]) == ("policy", key.pk, WOKEN)
        dep = wait_for(
            lambda: (d := ModelDeployment.objects.get(pk=dep_id)).state == "ready" and d, timeout=60, what="Ready"
        )
        assert dep.reserved_gpus == 1

        # Stopped again; meanwhile a platform admin gave the GPU away: the request says so, at once.
        _idle_stop(dep_id)
        wait_for(lambda: _asleep(local_runtime, dep_id), timeout=120, interval=1, what="the engine to go")
        TenantQuota.objects.filter(tenant=tx_world.alpha, flavor__name="cpu-local").update(nominal_gpus=0)
        refused = requests.post(
            f"{base}/completions",
            json={"model": "tiny-llama", "prompt": "Wake up", "max_tokens": 4},
            headers={"Authorization": f"Bearer {plaintext}", "X-Wake-Timeout": "60"},
            timeout=30,
        )
        assert (refused.status_code, refused.headers["Retry-After"]) == (503, "60")
        error = refused.json()["error"]
        assert error["code"] == "quota_exceeded" and "was not woken" in error["message"]
        with pytest.raises(InternalServerError) as again:
            client.completions.create(model="tiny-llama", prompt="x", max_tokens=1)
        assert again.value.status_code == 503
        dep.refresh_from_db()
        assert (dep.state, dep.reserved_gpus) == ("stopped", 0)
        assert DeploymentEvent.objects.filter(deployment_id=dep_id, reason=WAKE_REFUSED).count() == 1
