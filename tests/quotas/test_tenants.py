"""Tenant, flavor and quota administration reach Kueue on commit (through the real `kubernetes`
client against the API test server); the slug is fixed from creation (tests/quotas/test_names.py)."""

from __future__ import annotations

import pytest

from core.exceptions import DomainError
from quotas import flavors, services, tenants
from quotas.models import Tenant
from runtime import k8s


@pytest.fixture
def eager(monkeypatch):
    """Tasks run in this process when their commit hook fires (as a worker would run them)."""
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)


def gpu_nominal(cluster_queue: dict, flavor: str) -> list[int]:
    return [
        r["nominalQuota"]
        for g in cluster_queue["spec"]["resourceGroups"]
        for f in g["flavors"]
        if f["name"] == flavor
        for r in f["resources"]
        if r["name"] == "nvidia.com/gpu"
    ]


class TestMirroredOnCommit:
    def test_a_new_tenant_gets_its_namespace_and_queues_and_its_slug_locks(
        self, world, cluster_api, eager, django_capture_on_commit_callbacks
    ):
        admin = world.users["platform_admin"]
        with django_capture_on_commit_callbacks(execute=True):
            vision = tenants.tenant_create(actor=admin, slug="vision", display_name="Vision")
            assert cluster_api.get_object(k8s.NAMESPACE, "vision") is None  # nothing before the commit
        assert cluster_api.get_object(k8s.NAMESPACE, "vision") is not None
        assert cluster_api.get_object(k8s.LOCALQUEUE, "vision", "vision")["spec"]["clusterQueue"] == "tenant-vision"
        vision.refresh_from_db()
        assert vision.namespace_created is not None
        with pytest.raises(DomainError, match="The slug 'vision' is fixed"):
            tenants.tenant_update(tenant_id=vision.pk, actor=admin, slug="vision-2")

    def test_a_quota_set_and_an_archive_change_the_cluster_queue(
        self, world, cluster_api, eager, django_capture_on_commit_callbacks
    ):
        admin = world.users["platform_admin"]
        with django_capture_on_commit_callbacks(execute=True):
            services.quota_set(tenant=world.beta, flavor=world.h100, actor=admin, nominal_gpus=6)
        assert gpu_nominal(cluster_api.get_object(k8s.CLUSTERQUEUE, "tenant-beta"), "h100-sxm5") == [6]
        with django_capture_on_commit_callbacks(execute=True):
            tenants.tenant_mark_archived(tenant_id=world.beta.pk, actor=admin, reason="team gone")
        assert gpu_nominal(cluster_api.get_object(k8s.CLUSTERQUEUE, "tenant-beta"), "h100-sxm5") == [0]

    def test_a_flavor_edit_reaches_its_resource_flavor(
        self, world, cluster_api, eager, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            flavors.flavor_save(
                actor=world.users["platform_admin"],
                name="h100-sxm5",
                values={"node_labels": {"node.kubernetes.io/instance-type": "p5e.48xlarge"}},
            )
        flavor = cluster_api.get_object(k8s.RESOURCEFLAVOR, "h100-sxm5")
        assert flavor["spec"]["nodeLabels"] == {
            "node.kubernetes.io/instance-type": "p5e.48xlarge",
            "llm-portal.io/flavor": "h100-sxm5",
        }


class TestRefusals:
    def test_archiving_refuses_while_gpus_are_reserved(self, world):
        from core.exceptions import ConflictError
        from quotas.models import TenantQuota

        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(reserved_gpus=2)
        with pytest.raises(ConflictError, match="2 GPUs are still reserved"):
            tenants.tenant_mark_archived(tenant_id=world.alpha.pk, actor=world.users["platform_admin"], reason="x")
        assert not Tenant.objects.get(pk=world.alpha.pk).archived

    def test_an_archived_tenant_takes_no_quota_or_members(self, world):
        from core.exceptions import ConflictError
        from quotas.members import membership_add

        admin = world.users["platform_admin"]
        tenants.tenant_mark_archived(tenant_id=world.beta.pk, actor=admin, reason="gone")
        world.beta.refresh_from_db()
        with pytest.raises(DomainError) as refused:  # quotas.ceiling: the one answer, 400 "archived"
            services.quota_set(tenant=world.beta, flavor=world.h100, actor=admin, nominal_gpus=1)
        assert (refused.value.status_code, refused.value.code, refused.value.field) == (400, "archived", "tenant")
        with pytest.raises(ConflictError):
            membership_add(tenant=world.beta, actor=admin, user="alpha-viewer", role="viewer")

    def test_only_platform_admins_run_tenants_and_flavors(self, world):
        from core.exceptions import Forbidden

        for role in ("viewer", "member", "tenant_admin"):
            with pytest.raises(Forbidden):
                tenants.tenant_create(actor=world.users[role], slug="x", display_name="X")
            with pytest.raises(Forbidden):
                flavors.flavor_save(actor=world.users[role], name="a100-pcie", values={"active": False})
        assert not Tenant.objects.filter(slug="x").exists()
