"""The local gateway in front of the real engine: the tiny model served by vLLM's CPU build behind
`LocalBackend(gateway=True)`, called with the OpenAI Python client on the tenant's endpoint,
non-streaming and streaming; the usage log holds exactly the tokens the answers reported; the
engine's own port refuses a caller that skips the gateway."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.core.management import call_command

from runtime.backends.local.backend import LocalBackend
from runtime.backends.local.engine import VllmServer
from runtime.backends.local.gateway import GATEWAY_DIR
from runtime.backends.local.keys import store_key
from runtime.gateway_local.usage import USAGE_FILE, read_usage
from runtime.spec import DeploymentSpec, EngineOptions, FlavorSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.local_engine,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="needs the local extra: pip install '.[local]'"
    ),
]
CPU = FlavorSpec(name="cpu", gpu_model="CPU", accelerator_type="", gpu_memory_gib=0, gpus_per_node=1)
KEY = "llmp_" + "gateway" * 6


def test_the_openai_client_reaches_the_engine_through_the_gateway(tmp_path: Path, local_runtime: Path):
    from openai import OpenAI  # vLLM's dependency: here only with the [local] extra

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
        engine=VllmServer(),
        model_root=tmp_path,
        kvcache_gib=settings.LOCAL_KVCACHE_GIB,
        threads=settings.LOCAL_ENGINE_THREADS,
        key_seed="seed",
        gateway=True,
    )
    store_key(local_runtime, tenant_slug="demo", key_id=4, deployment_id=None, api_key=KEY)
    try:
        obs = backend.ensure(spec)
        deadline = time.monotonic() + 240
        while obs.state == "provisioning" and time.monotonic() < deadline:
            time.sleep(2)
            obs = backend.ensure(spec)
        assert obs.state == "ready", f"{obs.state}: {obs.reason}: {obs.message}"
        engine_url = f"http://127.0.0.1:{backend.load_state(1).ports[0]}/v1"
        assert requests.get(f"{engine_url}/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 401

        client = OpenAI(base_url=backend.tenant_endpoint("demo"), api_key=KEY, timeout=60, max_retries=0)
        assert [m.id for m in client.models.list()] == ["tiny-llama"]
        whole = client.completions.create(
            model="tiny-llama", prompt="The model serves", max_tokens=8, extra_body={"ignore_eos": True}
        )
        chunks = list(
            client.chat.completions.create(
                model="tiny-llama",
                messages=[{"role": "user", "content": "Hello"}],
                max_tokens=6,
                stream=True,
                extra_body={"ignore_eos": True},
            )
        )
        assert whole.usage.completion_tokens == 8 and whole.choices[0].text
        assert len([c for c in chunks if c.choices]) >= 6 and all(c.usage is None for c in chunks)  # none asked

        records = list(read_usage(local_runtime / GATEWAY_DIR / USAGE_FILE))
        assert [(r.key_id, r.deployment_id, r.model, r.completion_tokens, r.status) for r in records] == [
            (4, 1, "tiny-llama", 8, 200),
            (4, 1, "tiny-llama", 6, 200),
        ]
        assert records[0].prompt_tokens == whole.usage.prompt_tokens and records[1].prompt_tokens > 0
    finally:
        assert backend.remove(spec)
