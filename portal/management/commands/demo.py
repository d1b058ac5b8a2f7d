"""`python manage.py demo`: a populated portal for newcomers. Idempotent: run it again freely."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand
from django.db import transaction

from deployments import services
from deployments.models import ModelDeployment
from quotas.models import PLATFORM_ADMIN_GROUP, GpuFlavor, Membership, Tenant, TenantQuota
from quotas.services import schedule_kueue_sync

PASSWORD = "demo-password-123"

FLAVORS = [
    dict(
        name="h100-sxm5",
        gpu_model="H100 SXM5 80GB",
        accelerator_type="H100",
        gpu_memory_gib=80,
        gpus_per_node=8,
        cpu_per_gpu=12,
        memory_gib_per_gpu=120,
        price_per_gpu_hour=Decimal("3.90"),
        node_labels={"node.kubernetes.io/instance-type": "p5.48xlarge"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    ),
    dict(
        name="a100-pcie",
        gpu_model="A100 PCIe 80GB",
        accelerator_type="A100",
        gpu_memory_gib=80,
        gpus_per_node=4,
        cpu_per_gpu=8,
        memory_gib_per_gpu=64,
        price_per_gpu_hour=Decimal("1.80"),
        node_labels={"node.kubernetes.io/instance-type": "a2-ultragpu-4g"},
    ),
    dict(
        name="l4",
        gpu_model="L4 24GB",
        accelerator_type="L4",
        gpu_memory_gib=24,
        gpus_per_node=8,
        cpu_per_gpu=4,
        memory_gib_per_gpu=32,
        price_per_gpu_hour=Decimal("0.70"),
        # Own labels; every ResourceFlavor (and the CPU flavor for Ray heads) also gets
        # llm-portal.io/flavor=<name> at render time, which pods are pinned by: label the nodes so.
        node_labels={"node.kubernetes.io/instance-type": "g6.48xlarge"},
    ),
    # The local backend runs on this machine's CPU; the "GPU" here is one engine slot.
    dict(
        name="cpu-local",
        gpu_model="This machine (CPU, vLLM CPU build)",
        accelerator_type="CPU",
        gpu_memory_gib=4,
        gpus_per_node=1,
        cpu_per_gpu=2,
        memory_gib_per_gpu=4,
    ),
]
TENANTS = [
    ("search", "Search Relevance", {"h100-sxm5": (16, 8), "a100-pcie": (8, 0), "cpu-local": (2, 0)}, 0),
    ("support-bot", "Support Assistant", {"h100-sxm5": (8, 0), "l4": (16, 8), "cpu-local": (2, 0)}, 2),
]


def _sample_backend() -> str:
    """The GPU samples' backend: the default one when it runs on the cluster, else the first
    offered one that does (the samples need GPUs), else the default."""
    from runtime.backends import enabled

    on_cluster = enabled(on_cluster=True)
    if settings.RUNTIME_DEFAULT_BACKEND in on_cluster or not on_cluster:
        return settings.RUNTIME_DEFAULT_BACKEND
    return on_cluster[0]


class Command(BaseCommand):
    help = "Create demo tenants, users (one per role), GPU flavors, quotas and sample deployments."

    @transaction.atomic
    def handle(self, *args, **options):
        for values in FLAVORS:
            GpuFlavor.objects.update_or_create(name=values["name"], defaults=values)
        admin_group, _ = Group.objects.get_or_create(name=PLATFORM_ADMIN_GROUP)
        admin = self._user("admin", is_staff=True, is_superuser=True)
        admin.groups.add(admin_group)
        logins = [("admin", "platform admin (all tenants, approvals, cluster view)")]
        for slug, display, quotas, auto in TENANTS:
            tenant, _ = Tenant.objects.update_or_create(
                slug=slug, defaults={"display_name": display, "auto_approve_max_gpus": auto}
            )
            for flavor, (nominal, borrow) in quotas.items():
                TenantQuota.objects.get_or_create(
                    tenant=tenant,
                    flavor=GpuFlavor.objects.get(name=flavor),
                    defaults={"nominal_gpus": nominal, "borrowing_limit_gpus": borrow},
                )
            for role in ("viewer", "member", "tenant_admin"):
                username = f"{slug}-{role.replace('_', '-')}"
                Membership.objects.update_or_create(user=self._user(username), tenant=tenant, defaults={"role": role})
                logins.append((username, f"{role.replace('_', ' ')} of {display}"))
        # Mirror the tenants, flavors and quotas to Kueue as soon as this commits, ahead of the
        # sample's reconcile: the worker runs it when it starts (the broker keeps the message
        # until then), so nothing waits for the beat's kueue-sync, which is only the repair pass.
        schedule_kueue_sync(None)
        self._samples(admin)
        self.stdout.write(
            self.style.SUCCESS(f"Demo data ready. Sign in with any of these (password for all: {PASSWORD}):")
        )
        for username, what in logins:
            self.stdout.write(f"  {username:28} {what}")

    def _user(self, username: str, **flags) -> User:
        user, created = User.objects.get_or_create(username=username, defaults=flags)
        if created:
            user.set_password(PASSWORD)
            user.save()
        return user

    def _samples(self, admin: User) -> None:
        """A few requests so lists, the inbox and the quota bars are not empty: one serving with a
        change waiting for approval, one request waiting for its first decision."""
        search = Tenant.objects.get(slug="search")
        member = User.objects.get(username="search-member")
        samples = [
            dict(
                name="llama3-70b-chat",
                model_source="meta-llama/Meta-Llama-3-70B-Instruct",
                served_model_name="llama3-70b",
                flavor="h100-sxm5",
                tensor_parallel_size=4,
                max_replicas=2,
                max_model_len=8192,
                approve=True,
                change={"max_replicas": 3, "gpu_memory_utilization": 0.92},
            ),
            dict(
                name="qwen-7b-rerank",
                model_source="Qwen/Qwen2.5-7B-Instruct",
                served_model_name="qwen2.5-7b",
                flavor="a100-pcie",
                max_replicas=2,
                max_model_len=16384,
                approve=False,
            ),
        ]
        for sample in samples:
            if ModelDeployment.objects.filter(tenant=search, name=sample["name"]).live().exists():
                continue
            approve = sample.pop("approve")
            change = sample.pop("change", None)
            data = {
                "backend": _sample_backend(),
                "dtype": "bfloat16",
                **sample,
                "flavor": GpuFlavor.objects.get(name=sample["flavor"]),
            }
            dep = services.deployment_create(tenant=search, user=member, data=data)
            if approve:
                services.deployment_approve(
                    deployment_id=dep.pk,
                    revision=dep.proposed_number,
                    approver=admin,
                    reason="Demo: approved by the platform team.",
                )
            if change:  # a proposed revision beside the serving one: the approvals page shows its diff
                services.deployment_update(deployment_id=dep.pk, user=member, data=change)
