"""The test process's broker: its URL and a purge before a test starts a worker (the worker itself
is `tests.support.processes.celery_worker`)."""

from __future__ import annotations

import redis


def broker_url() -> str:
    """The test process's own broker (a Redis database of the tests' own, see pyproject)."""
    from django.conf import settings

    return settings.CELERY_BROKER_URL


def purge_broker() -> None:
    """Drop messages earlier tests left (requeues whose deployments rolled back)."""
    redis.Redis.from_url(broker_url()).flushdb()


def local_cpu_model(world, tmp_path, settings):
    """A generated tiny Llama under the test's model root, a CPU flavor `cpu-local` with one
    "GPU" of quota for alpha, and an empty broker; returns the model's path."""
    from decimal import Decimal

    from django.core.management import call_command

    from quotas.models import GpuFlavor, TenantQuota

    settings.LOCAL_MODEL_ROOT = str(tmp_path)  # local model paths must lie under the model root
    model = tmp_path / "tiny-llama"
    call_command("make_tiny_model", output=model)
    cpu = GpuFlavor.objects.create(
        name="cpu-local",
        gpu_model="CPU (vLLM CPU build)",
        accelerator_type="CPU",
        gpu_memory_gib=4,
        gpus_per_node=1,
        price_per_gpu_hour=Decimal("0"),
    )
    TenantQuota.objects.create(tenant=world.alpha, flavor=cpu, nominal_gpus=1)
    purge_broker()
    return model


def request_and_approve_local(world, model, name: str) -> int:
    """A member requests the tiny model on the local backend over the API, a platform admin
    approves revision 1; returns the deployment's id."""
    member, admin = world.client("member"), world.client("platform_admin")
    created = member.post(
        "/api/v1/deployments/",
        {
            "tenant": "alpha",
            "name": name,
            "model_source": str(model),
            "served_model_name": "tiny-llama",
            "flavor": "cpu-local",
            "backend": "local",
            "max_model_len": 256,
            "dtype": "bfloat16",
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    dep_id = created.json()["id"]
    assert admin.post(f"/api/v1/deployments/{dep_id}/approve/", {"revision": 1}, format="json").status_code == 200
    return dep_id
