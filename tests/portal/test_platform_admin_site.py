"""The Django admin: every model registered with list displays, filters and search; state and
accounting read-only; edits saved through the services (audited, refusals rolled back)."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client

from core.models import AuditEvent
from deployments import services
from quotas.models import GpuFlavor, Membership, Tenant, TenantQuota
from tests.support.factories import draft

APPS = ("core", "portal", "catalog", "quotas", "deployments", "metrics")


@pytest.fixture
def staff(world) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.org", "unused-password"))
    return client


def test_every_model_of_every_app_is_registered():
    missing = [
        model._meta.label
        for app in APPS
        for model in apps.get_app_config(app).get_models()
        if not admin.site.is_registered(model)
    ]
    assert not missing


def test_every_changelist_loads_with_search_and_its_filters(world, staff):
    services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
    for app in APPS:
        for model in apps.get_app_config(app).get_models():
            url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
            model_admin = admin.site._registry[model]
            query = {"q": "alpha"} if model_admin.search_fields else {}
            response = staff.get(url, query)
            assert response.status_code == 200, url


class TestReadOnlyState:
    def test_a_deployment_cannot_be_changed_or_deleted_here(self, world, staff):
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        url = f"/admin/deployments/modeldeployment/{dep.pk}/change/"
        page = staff.get(url).content.decode()
        assert 'name="_save"' not in page  # a view page, no form
        assert staff.post(url, {"state": "ready"}).status_code == 403
        assert staff.post(f"/admin/deployments/modeldeployment/{dep.pk}/delete/", {"post": "yes"}).status_code == 403
        dep.refresh_from_db()
        assert dep.state == "pending_approval"

    def test_reserved_gpus_and_the_policy_are_not_fields_of_the_forms(self, world, staff):
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        page = staff.get(f"/admin/quotas/tenantquota/{quota.pk}/change/").content.decode()
        assert 'name="nominal_gpus"' in page and 'name="reserved_gpus"' not in page
        page = staff.get(f"/admin/quotas/tenant/{world.alpha.pk}/change/").content.decode()
        assert 'name="display_name"' in page and 'name="auto_approve_max_gpus"' not in page


class TestSavedThroughServices:
    def test_a_quota_edit_is_audited(self, world, staff):
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        body = {"nominal_gpus": 10, "borrowing_limit_gpus": 4, "lending_limit_gpus": "", "_save": "Save"}
        response = staff.post(f"/admin/quotas/tenantquota/{quota.pk}/change/", body)
        assert response.status_code == 302
        quota.refresh_from_db()
        assert quota.nominal_gpus == 10
        entry = AuditEvent.objects.get(action="quota.set")
        assert entry.reason == "Django admin" and entry.changes["from"]["nominal_gpus"] == 8

    def test_a_refused_edit_writes_nothing_and_says_why(self, world, staff):
        Tenant.objects.filter(pk=world.alpha.pk).update(namespace_created="2026-12-01T00:00:00Z")
        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(reserved_gpus=6)
        quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
        body = {"nominal_gpus": 1, "borrowing_limit_gpus": 0, "lending_limit_gpus": "", "_save": "Save"}
        response = staff.post(f"/admin/quotas/tenantquota/{quota.pk}/change/", body, follow=True)
        assert "Not saved: 6 GPUs are reserved" in response.content.decode()
        quota.refresh_from_db()
        assert quota.nominal_gpus == 8 and not AuditEvent.objects.filter(action="quota.set").exists()

    def test_a_tenant_created_here_is_audited_and_its_slug_locks_with_its_namespace(self, world, staff):
        body = {"slug": "vision", "display_name": "Vision", "cohort": "", "_save": "Save"}
        assert staff.post("/admin/quotas/tenant/add/", body).status_code == 302
        vision = Tenant.objects.get(slug="vision")
        assert AuditEvent.objects.filter(action="tenant.create", tenant=vision, reason="Django admin").exists()
        Tenant.objects.filter(pk=vision.pk).update(namespace_created="2026-12-01T00:00:00Z")
        page = staff.get(f"/admin/quotas/tenant/{vision.pk}/change/").content.decode()
        assert 'name="slug"' not in page

    def test_flavors_are_retired_not_deleted(self, world, staff):
        response = staff.post(
            "/admin/quotas/gpuflavor/", {"action": "retire", "_selected_action": [world.a100.pk]}, follow=True
        )
        assert response.status_code == 200
        assert GpuFlavor.objects.get(pk=world.a100.pk).active is False
        assert staff.post(f"/admin/quotas/gpuflavor/{world.h100.pk}/delete/", {"post": "yes"}).status_code == 403

    def test_a_membership_removed_here_is_audited(self, world, staff):
        membership = Membership.objects.get(user=world.users["viewer"])
        response = staff.post(f"/admin/quotas/membership/{membership.pk}/delete/", {"post": "yes"})
        assert response.status_code == 302 and not Membership.objects.filter(pk=membership.pk).exists()
        assert AuditEvent.objects.get(action="membership.remove").changes["user"] == "alpha-viewer"
