"""One fixed multi-tenant world and a permission-matrix helper every endpoint test reuses.

Two tenants (alpha, beta); in each a viewer, a member and a tenant admin; one platform admin.
GPU flavors: H100 SXM5 (8 per node) and A100 PCIe (4 per node). Quotas: alpha 8 H100 nominal
+ 4 borrowing, 4 A100; beta 8 H100 nominal, no borrowing.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from quotas.models import PLATFORM_ADMIN_GROUP, GpuFlavor, Membership, Tenant, TenantQuota

ROLES = ("anonymous", "viewer", "member", "tenant_admin", "platform_admin", "other_member")
PASSWORD = "correct-horse-battery"


@dataclass
class World:
    alpha: Tenant
    beta: Tenant
    h100: GpuFlavor
    a100: GpuFlavor
    users: dict[str, User | None]

    def client(self, role: str) -> APIClient:
        """An API client authenticated as `role` (session auth; tokens are tested separately)."""
        client = APIClient()
        user = self.users[role]
        if user is not None:
            client.force_authenticate(user)
        return client

    def browser(self, role: str):
        """A Django test client logged in as `role` (for UI views)."""
        from django.test import Client

        client = Client()
        if self.users[role] is not None:
            client.force_login(self.users[role])
        return client


def build_world() -> World:
    h100 = GpuFlavor.objects.create(
        name="h100-sxm5",
        gpu_model="H100 SXM5",
        accelerator_type="H100",
        gpu_memory_gib=80,
        gpus_per_node=8,
        cpu_per_gpu=12,
        memory_gib_per_gpu=120,
        node_labels={"node.kubernetes.io/instance-type": "p5.48xlarge"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        price_per_gpu_hour=Decimal("3.90"),
    )
    a100 = GpuFlavor.objects.create(
        name="a100-pcie", gpu_model="A100 PCIe 80GB", accelerator_type="A100", gpu_memory_gib=80, gpus_per_node=4
    )
    alpha = Tenant.objects.create(slug="alpha", display_name="Team Alpha")
    beta = Tenant.objects.create(slug="beta", display_name="Team Beta")
    TenantQuota.objects.create(tenant=alpha, flavor=h100, nominal_gpus=8, borrowing_limit_gpus=4)
    TenantQuota.objects.create(tenant=alpha, flavor=a100, nominal_gpus=4)
    TenantQuota.objects.create(tenant=beta, flavor=h100, nominal_gpus=8)
    users: dict[str, User | None] = {"anonymous": None}
    for role in ("viewer", "member", "tenant_admin"):
        user = User.objects.create_user(f"alpha-{role}", password=PASSWORD)
        Membership.objects.create(user=user, tenant=alpha, role=role)
        users[role] = user
    other = User.objects.create_user("beta-member", password=PASSWORD)
    Membership.objects.create(user=other, tenant=beta, role="member")
    users["other_member"] = other
    admin = User.objects.create_user("platform-admin", password=PASSWORD)
    admin.groups.add(Group.objects.get_or_create(name=PLATFORM_ADMIN_GROUP)[0])
    users["platform_admin"] = admin
    return World(alpha=alpha, beta=beta, h100=h100, a100=a100, users=users)


@pytest.fixture
def world(db) -> World:
    return build_world()


@pytest.fixture
def tx_world(transactional_db) -> World:
    """The same world for tests that need real commits (threads, workers, live servers)."""
    return build_world()


def check_matrix(world: World, call, expected: dict[str, int | tuple[int, ...]]) -> None:
    """Call `call(client)` once per role and assert the status code.

    `expected` maps each role in ROLES to a status (or a tuple of acceptable ones). Every role
    must be listed, so a new endpoint cannot forget one of them.
    """
    missing = set(ROLES) - set(expected)
    assert not missing, f"permission matrix incomplete: {sorted(missing)}"
    failures = []
    for role in ROLES:
        response = call(world.client(role))
        allowed = expected[role] if isinstance(expected[role], tuple) else (expected[role],)
        if response.status_code not in allowed:
            failures.append(f"{role}: got {response.status_code}, expected {allowed}")
    assert not failures, "\n".join(failures)


@pytest.fixture
def cluster_api(k8s_api, settings):
    """The Kubernetes API test server, with the portal's settings pointed at it."""
    settings.KUBERNETES_URL = k8s_api.url
    settings.KUBERNETES_TIMEOUT_SECONDS = 2.0
    return k8s_api
