"""Models as a service on the local engine (issue 34's "done when"): beta serves two deployments
and subscribes to one alpha shares; three vLLM CPU engines (the tiny model under three served
names) behind `LocalBackend(gateway=True)`. One beta key lists exactly its three models at
`/v1/models` of beta's one base URL and reaches each by name with the OpenAI Python client, streamed
and not; alpha's key gets 401 there; past beta's token limit on the shared model, 429; the usage
rows counted from the gateway's log (access.key_usage) hold exactly the tokens the answers
reported. A caller that skips the gateway is refused by the engine's own port."""

from __future__ import annotations

import importlib.util
import time
from collections import defaultdict
from pathlib import Path

import pytest
import requests
from django.conf import settings
from django.core.management import call_command

from access.key_usage import count_gateway_log
from access.models import KeyUsageDay
from access.services import key_mint
from deployments import services as deployments
from quotas.models import Membership
from runtime.backends.local.backend import LocalBackend
from runtime.backends.local.engine import VllmServer
from runtime.backends.local.gateway import GATEWAY_DIR
from runtime.backends.local.keys import store_key
from runtime.gateway_local.usage import USAGE_FILE, read_usage
from runtime.spec import DeploymentSpec, EngineOptions, FlavorSpec
from sharing import services as sharing
from sharing.local import active_shares
from tests.support.factories import draft
from tests.support.processes import wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.local_engine,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="needs the local extra: pip install '.[local]'"
    ),
]
CPU = FlavorSpec(name="cpu", gpu_model="CPU", accelerator_type="", gpu_memory_gib=0, gpus_per_node=1)
TOKEN_LIMIT = 20  # beta's tokens per minute on the shared model: the second call crosses it


def _records(root: Path) -> list:
    return list(read_usage(root / GATEWAY_DIR / USAGE_FILE))


def _streamed(root: Path, name: str) -> list:
    """The usage rows of `name`'s five-token answers (the gateway logs a stream after its last event)."""
    return [r for r in _records(root) if r.model == name and r.completion_tokens == 5]


def spec(dep, model: Path) -> DeploymentSpec:
    return DeploymentSpec(
        deployment_id=dep.pk,
        name=dep.name,
        namespace=dep.tenant.slug,
        tenant_slug=dep.tenant.slug,
        queue_name="lq",
        model_source=str(model),
        served_model_name=dep.served_model_name,
        flavor=CPU,
        backend="local",
        engine=EngineOptions(max_model_len=512),
    )


def test_one_base_url_three_models_a_foreign_key_a_limit_and_exact_usage(world, tmp_path, local_runtime):
    from openai import (
        AuthenticationError,
        OpenAI,
        RateLimitError,
    )  # vLLM's dependency: here only with the [local] extra

    model = tmp_path / "tiny-llama"
    call_command("make_tiny_model", output=model)
    made = {}
    for tenant, user, name in (
        (world.alpha, world.users["member"], "shared"),
        (world.beta, world.users["other_member"], "one"),
        (world.beta, world.users["other_member"], "two"),
    ):
        dep = deployments.deployment_create(
            tenant=tenant, user=user, data=draft(world, name=name, served_model_name=f"tiny-{name}", backend="local")
        )
        made[name] = dep
    Membership.objects.filter(user=world.users["other_member"]).update(role="tenant_admin")
    beta_admin = type(world.users["other_member"]).objects.get(pk=world.users["other_member"].pk)  # roles re-read
    sharing.publish(
        user=world.users["tenant_admin"], deployment_id=made["shared"].pk, tenants=["beta"],
        auto_approve=True, tokens_per_minute=TOKEN_LIMIT,
    )  # fmt: skip
    sharing.subscribe(user=beta_admin, consumer=world.beta, deployment_id=made["shared"].pk)
    keys = {}
    for tenant, user, label in ((world.beta, beta_admin, "beta"), (world.alpha, world.users["tenant_admin"], "alpha")):
        key, plaintext = key_mint(user=user, tenant=tenant, name=f"{label}-key")
        store_key(local_runtime, tenant_slug=tenant.slug, key_id=key.pk, deployment_id=None, api_key=plaintext)
        keys[label] = (key, plaintext)

    backend = LocalBackend(
        local_runtime,
        engine=VllmServer(),
        model_root=tmp_path,
        kvcache_gib=settings.LOCAL_KVCACHE_GIB,
        threads=1,
        key_seed="seed",
        gateway=True,
    )
    specs = [spec(dep, model) for dep in made.values()]
    try:
        assert backend.share(active_shares()) is True
        states = {s.deployment_id: backend.ensure(s).state for s in specs}  # all three start at once
        deadline = time.monotonic() + 420
        while any(state == "provisioning" for state in states.values()) and time.monotonic() < deadline:
            time.sleep(3)
            states = {s.deployment_id: backend.ensure(s).state for s in specs}
        assert set(states.values()) == {"ready"}, states

        shared_engine = f"http://127.0.0.1:{backend.load_state(made['shared'].pk).ports[0]}/v1"
        skipped = requests.get(f"{shared_engine}/models", headers={"Authorization": f"Bearer {keys['beta'][1]}"})
        assert skipped.status_code == 401  # the engine takes only the gateway's key

        base = backend.tenant_endpoint("beta")
        beta = OpenAI(base_url=base, api_key=keys["beta"][1], timeout=120, max_retries=0)
        assert sorted(m.id for m in beta.models.list()) == ["tiny-one", "tiny-shared", "tiny-two"]
        sent = defaultdict(lambda: [0, 0])  # served name -> [prompt, completion] as the answers said
        for name in ("tiny-one", "tiny-two", "tiny-shared"):
            answer = beta.completions.create(
                model=name, prompt="One base URL", max_tokens=6, extra_body={"ignore_eos": True}
            )
            assert answer.model == name and answer.usage.completion_tokens == 6
            sent[name][0] += answer.usage.prompt_tokens
            sent[name][1] += answer.usage.completion_tokens
        for name, asked in (("tiny-two", False), ("tiny-shared", True)):  # streamed, with and without usage
            chunks = list(
                beta.chat.completions.create(
                    model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=5, stream=True,
                    extra_body={"ignore_eos": True}, **({"stream_options": {"include_usage": True}} if asked else {}),
                )
            )  # fmt: skip
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            if asked:
                assert chunks[-1].usage.completion_tokens == 5
            else:  # not asked: the gateway asked the engine for it, counted it, and left it out
                assert all(c.usage is None for c in chunks)
            print(
                "DEBUG",
                name,
                [(r.model, r.prompt_tokens, r.completion_tokens, r.status) for r in _records(local_runtime)],
                flush=True,
            )
            logged = wait_for(lambda n=name: _streamed(local_runtime, n), timeout=10, what="the stream's usage row")
            sent[name][0] += logged[-1].prompt_tokens
            sent[name][1] += logged[-1].completion_tokens
        assert sum(sent["tiny-shared"]) >= TOKEN_LIMIT  # so the limit is used up now
        with pytest.raises(RateLimitError):
            beta.completions.create(model="tiny-shared", prompt="x", max_tokens=1)
        extra = beta.completions.create(model="tiny-one", prompt="x", max_tokens=1, extra_body={"ignore_eos": True})
        sent["tiny-one"][0] += extra.usage.prompt_tokens
        sent["tiny-one"][1] += extra.usage.completion_tokens
        alpha = OpenAI(base_url=base, api_key=keys["alpha"][1], max_retries=0)
        with pytest.raises(AuthenticationError):
            alpha.completions.create(model="tiny-one", prompt="x")

        records = _records(local_runtime)
        settings.LOCAL_RUNTIME_DIR = local_runtime
        assert count_gateway_log() == len(records)
        rows = {
            (r.deployment.served_model_name): (r.requests, r.failed, r.prompt_tokens, r.completion_tokens)
            for r in KeyUsageDay.objects.filter(key=keys["beta"][0]).select_related("deployment")
        }
        assert rows == {
            "tiny-one": (2, 0, *sent["tiny-one"]),
            "tiny-two": (2, 0, *sent["tiny-two"]),
            "tiny-shared": (3, 1, *sent["tiny-shared"]),  # the 429 is a failed request with no tokens
        }
        assert {r.consumer for r in records if r.deployment_id == made["shared"].pk} == {"beta"}
    finally:
        for s in specs:
            assert backend.remove(s)
