"""Names that must keep their meaning (issue 31): a tenant's slug is fixed from creation and never
given to another tenant, and every value a platform admin (or a member) types that becomes a
Kubernetes field is refused where it is typed, as that field, with the field's message.

The syntax itself, against what the API server answers, is tests/runtime/test_syntax.py.
"""

from __future__ import annotations

import pytest
from django.contrib import admin as django_admin
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from access.models import ApiKey
from quotas.models import GpuFlavor, RetiredTenantSlug, Tenant
from runtime.backends.local.keys import keys_for
from tests.support.factories import api_draft

T = "/api/v1/tenants"
FLAVOR = {"name": "l40s", "gpu_model": "L40S", "accelerator_type": "L40S", "gpu_memory_gib": 48, "gpus_per_node": 8}
FLAVOR_FORM = {**FLAVOR, "cpu_per_gpu": 8, "memory_gib_per_gpu": 64, "tolerations": "", "active": "on"}


@pytest.fixture
def eager(monkeypatch):
    """Tasks run in this process when their commit hook fires (as a worker would run them)."""
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)


@pytest.fixture
def local_keys(settings, tmp_path):
    """Keys published to the local engines' key store only (no Gateway), under tmp_path."""
    settings.GATEWAY_PUBLIC_URL = None
    settings.LOCAL_RUNTIME_DIR = tmp_path / "runtime"
    return settings.LOCAL_RUNTIME_DIR


class TestTheSlugIsFixed:
    def test_a_renamed_slug_cannot_hand_a_published_key_to_the_next_team_of_that_name(
        self, world, local_keys, eager, django_capture_on_commit_callbacks
    ):
        """The issue's case: alpha (never synced, so its slug was still "unlocked") mints a
        tenant-wide key, written to keys/alpha/<id>.json; renaming alpha and creating a new
        "alpha" would give the new team's engines the old team's key, and the revoke would
        look for the file under the new slug and leave it in place."""
        with django_capture_on_commit_callbacks(execute=True):
            minted = world.client("member").post("/api/v1/keys/", {"tenant": "alpha", "name": "ci"}, format="json")
        assert minted.status_code == 201, minted.content
        assert keys_for(local_keys, "alpha", 1) == [minted.json()["key"]]
        admin = world.client("platform_admin")

        renamed = admin.patch(f"{T}/alpha/", {"slug": "alpha-old", "reason": "team renamed"}, format="json")
        assert renamed.status_code == 400 and renamed.json()["code"] == "immutable"
        assert "The slug 'alpha' is fixed" in renamed.json()["slug"][0]
        again = admin.post(f"{T}/", {"slug": "alpha", "display_name": "New Alpha"}, format="json")
        assert again.status_code == 409 and "slug" in again.json()
        assert Tenant.objects.filter(slug="alpha").count() == 1

        with django_capture_on_commit_callbacks(execute=True):
            revoked = world.client("member").post(f"/api/v1/keys/{minted.json()['id']}/revoke/", {}, format="json")
        assert revoked.status_code == 200, revoked.content
        assert ApiKey.objects.get(pk=minted.json()["id"]).gateway_state == "withdrawn"
        assert keys_for(local_keys, "alpha", 1) == []
        assert not list((local_keys / "keys").rglob("*.json"))  # nothing left anywhere

    def test_the_admin_shows_the_slug_of_an_existing_tenant_read_only(self, world, rf):
        tenant_admin = django_admin.site._registry[Tenant]
        request = rf.get("/")
        request.user = world.users["platform_admin"]
        assert "slug" in tenant_admin.get_readonly_fields(request, world.alpha)
        assert "slug" not in tenant_admin.get_readonly_fields(request, None)  # typed once, at creation

    def test_the_database_refuses_a_rename_that_bypasses_the_service(self, world):
        with pytest.raises(IntegrityError, match="is fixed"), transaction.atomic():
            Tenant.objects.filter(pk=world.alpha.pk).update(slug="alpha-2")
        assert list(Tenant.objects.values_list("slug", flat=True)) == ["alpha", "beta"]
        Tenant.objects.filter(pk=world.alpha.pk).update(display_name="Alpha")  # other columns change freely
        assert Tenant.objects.get(pk=world.alpha.pk).display_name == "Alpha"

    def test_a_deleted_tenants_slug_is_never_given_again(self, world):
        """The portal archives tenants; a row deleted anyway (a shell, a script) retires its slug."""
        Tenant.objects.filter(pk=world.beta.pk).delete()
        assert list(RetiredTenantSlug.objects.values_list("slug", flat=True)) == ["beta"]
        response = world.client("platform_admin").post(f"{T}/", {"slug": "beta", "display_name": "New Beta"})
        assert response.status_code == 409 and response.json()["code"] == "retired", response.content
        assert "belonged to a deleted tenant" in response.json()["slug"][0]
        with pytest.raises(IntegrityError, match="belonged to a deleted tenant"), transaction.atomic():
            Tenant.objects.create(slug="beta", display_name="Around the service")
        assert list(Tenant.objects.values_list("slug", flat=True)) == ["alpha"]


class TestReservedNamespaces:
    @pytest.mark.parametrize("slug", ["default", "kube-system", "kube-tenant", "kuadrant-system", "gateway-system"])
    def test_a_system_or_platform_namespace_is_no_tenant_slug_anywhere(self, world, slug):
        response = world.client("platform_admin").post(f"{T}/", {"slug": slug, "display_name": "X"}, format="json")
        assert response.status_code == 400 and "slug" in response.json(), response.content
        assert "namespace" in response.json()["slug"][0]
        page = world.browser("platform_admin").post("/platform/tenants/new/", {"slug": slug, "display_name": "X"})
        assert page.status_code == 200 and "namespace" in page.content.decode()
        with pytest.raises(ValidationError) as refused:
            Tenant(slug=slug, display_name="X").full_clean()
        assert list(refused.value.message_dict) == ["slug"]
        assert Tenant.objects.count() == 2

    def test_the_configured_key_namespace_is_reserved_whatever_it_is_called(self, world, settings):
        settings.API_KEY_NAMESPACE = "portal-keys"
        response = world.client("platform_admin").post(f"{T}/", {"slug": "portal-keys", "display_name": "X"})
        assert response.status_code == 400 and "namespace of the platform" in response.json()["slug"][0]
        assert (
            world.client("platform_admin").post(f"{T}/", {"slug": "kuadrant-system", "display_name": "X"}).status_code
            == 201
        )


class TestFlavorNames:
    def test_a_gpu_flavor_cannot_take_the_cpu_flavors_name(self, world, settings):
        """Its ResourceFlavor would overwrite the CPU flavor's, listed twice in every ClusterQueue,
        and llm-portal.io/flavor=<that name> would put Ray heads on GPU nodes."""
        settings.KUEUE_CPU_FLAVOR = "cpu-heads"
        admin = world.client("platform_admin")
        response = admin.post("/api/v1/flavors/", {**FLAVOR, "name": "cpu-heads"}, format="json")
        assert response.status_code == 400 and "KUEUE_CPU_FLAVOR" in response.json()["name"][0], response.content
        page = world.browser("platform_admin").post("/platform/flavors/new/", {**FLAVOR_FORM, "name": "cpu-heads"})
        assert page.status_code == 200 and "KUEUE_CPU_FLAVOR" in page.content.decode()
        assert not GpuFlavor.objects.filter(name="cpu-heads").exists()
        assert admin.post("/api/v1/flavors/", {**FLAVOR, "name": "portal-cpu"}, format="json").status_code == 201


# Tolerations Kueue copies into every admitted pod: the pod's API validation (ValidateTolerations)
# refuses these although the ResourceFlavor CRD (no key or value syntax) takes them.
HOSTILE_TOLERATIONS = [
    ({"key": "bad key!", "operator": "Exists"}, "'bad key!' is not a label key"),
    ({"key": "Example.com/gpu", "operator": "Exists"}, "its prefix must be a lowercase DNS name"),
    ({"key": "/gpu", "operator": "Exists"}, "the prefix before '/' is empty"),
    ({"key": "a/b/c", "operator": "Exists"}, "'a/b/c' is not a label key"),
    ({"key": "k" * 64, "operator": "Exists"}, "more than 63 characters"),
    ({"key": "dedicated-", "operator": "Exists"}, "'dedicated-' is not a label key"),
    ({"key": "dedicated", "value": "x\n- key: y"}, "is not a label value"),
    ({"key": "dedicated", "value": "v" * 64}, "is not a label value"),
    ({"key": "dedicated", "value": "-x", "effect": "NoExecute"}, "is not a label value"),
]


class TestTolerationsAreTaintFields:
    @pytest.mark.parametrize(("toleration", "message"), HOSTILE_TOLERATIONS)
    def test_the_api_answers_400_on_the_field_for_a_flavor_the_portal_does_not_provision(
        self, world, toleration, message
    ):
        admin = world.client("platform_admin")
        response = admin.post("/api/v1/flavors/", {**FLAVOR, "tolerations": [toleration]}, format="json")
        assert response.status_code == 400 and list(response.json()) == ["tolerations"], response.content
        assert any(m.startswith("Toleration 1: ") and message in m for m in response.json()["tolerations"])
        assert not GpuFlavor.objects.filter(name="l40s").exists()
        before = list(GpuFlavor.objects.filter(name="h100-sxm5").values())
        response = admin.patch("/api/v1/flavors/h100-sxm5/", {"tolerations": [toleration]}, format="json")
        assert response.status_code == 400 and list(response.json()) == ["tolerations"]
        assert list(GpuFlavor.objects.filter(name="h100-sxm5").values()) == before

    @pytest.mark.parametrize(
        ("line", "message"),
        [("bad key!:NoSchedule", "is not a label key"), ("dedicated=-x:NoSchedule", "is not a label value")],
    )
    def test_the_flavor_form_shows_the_field_error(self, world, line, message):
        response = world.browser("platform_admin").post("/platform/flavors/new/", {**FLAVOR_FORM, "tolerations": line})
        assert response.status_code == 200 and message in response.content.decode()
        assert not GpuFlavor.objects.filter(name="l40s").exists()

    def test_keys_and_values_at_the_limits_are_accepted(self, world):
        longest = {"key": f"{'p' * 253}/{'n' * 63}", "operator": "Equal", "value": "V" * 63, "effect": "NoSchedule"}
        tolerations = [longest, {"key": "x", "operator": "Exists"}, {"key": "k", "value": ""}]
        response = world.client("platform_admin").post(
            "/api/v1/flavors/", {**FLAVOR, "tolerations": tolerations}, format="json"
        )
        assert response.status_code == 201, response.content
        assert GpuFlavor.objects.get(name="l40s").tolerations == tolerations


class TestSecretNames:
    @pytest.mark.parametrize("secret", ["a..b", "a.-b", "a-.b", ".a", "-a", "a-", "A", "a_b"])
    def test_an_hf_token_secret_that_is_no_secret_name_is_400_on_the_field(self, world, secret):
        response = world.client("member").post(
            "/api/v1/deployments/", api_draft(world, hf_token_secret=secret), format="json"
        )
        assert response.status_code == 400 and "hf_token_secret" in response.json(), response.content
        assert "Not a valid Kubernetes Secret name" in str(response.json()["hf_token_secret"])

    @pytest.mark.parametrize("secret", ["hf-token", "hf.token.v2", "a" * 253])
    def test_secret_names_at_the_limits_are_accepted(self, world, secret):
        response = world.client("member").post(
            "/api/v1/deployments/", api_draft(world, hf_token_secret=secret), format="json"
        )
        assert response.status_code == 201, response.content


class TestKubernetesNameSettings:
    """Names a platform admin types into the environment: refused at start (portal.E001)."""

    def test_the_shipped_defaults_pass(self):
        from portal.checks import check_kubernetes_names

        assert check_kubernetes_names(None) == []

    @pytest.mark.parametrize(
        ("setting", "value", "message"),
        [
            ("KUEUE_CPU_FLAVOR", "Portal_CPU", "DNS-1123 label"),
            ("KUEUE_COHORT", "c" * 64, "At most 63 characters"),
            ("API_KEY_NAMESPACE", "keys.example", "DNS-1123 label"),
            ("GATEWAY_NAME", "gw..1", "DNS-1123 subdomain"),
            ("MODEL_CACHE_PVC", "cache-", "DNS-1123 subdomain"),
            ("KUEUE_CPU_NODE_LABELS", {"Example.com/pool": "cpu"}, "its prefix must be a lowercase DNS name"),
            ("KUEUE_CPU_NODE_LABELS", {"pool": "cpu-"}, "is not a label value"),
        ],
    )
    def test_a_name_kubernetes_would_refuse_stops_the_portal(self, settings, setting, value, message):
        from django.core.management import call_command
        from django.core.management.base import SystemCheckError

        setattr(settings, setting, value)
        with pytest.raises(SystemCheckError, match=r"portal\.E001") as refused:
            call_command("check")
        assert setting in str(refused.value) and message in str(refused.value)
