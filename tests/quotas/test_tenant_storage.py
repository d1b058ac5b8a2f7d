"""The model-cache claim the Kueue sync keeps in each tenant namespace (quotas.model_cache), through
the real `kubernetes` client against the API test server: created when absent, grown only, never
shrunk or deleted, and a refused expansion or a different storage class recorded for the tenant's page."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from core.models import AuditEvent
from portal.checks import check_kubernetes_names
from quotas.kueue import sync_kueue
from quotas.models import Tenant
from runtime import k8s
from runtime.manifests.storage import quantity_bytes, render_model_cache_claim
from tests.support.world import check_matrix


def claim(api, namespace="alpha"):
    return api.get_object(k8s.PVC, "model-cache", namespace)


def bind(api, namespace="alpha"):
    """What the volume controller does once a volume is provisioned for the claim."""
    api.patch_object(k8s.PVC, "model-cache", namespace, {"status": {"phase": "Bound"}}, status_only=True)


@pytest.fixture
def cache(settings):
    settings.MODEL_CACHE_PVC = "model-cache"
    settings.MODEL_CACHE_SIZE_GI = 200
    settings.MODEL_CACHE_STORAGE_CLASS = "efs-sc"
    return settings


class TestTheClaim:
    def test_the_sync_creates_a_shared_claim_in_each_tenant_namespace(self, world, cluster_api, cache):
        Tenant.objects.filter(pk=world.beta.pk).update(model_cache_size_gi=50, model_cache_storage_class="fast-rwx")
        sync_kueue()
        alpha, beta = claim(cluster_api, "alpha"), claim(cluster_api, "beta")
        assert alpha["spec"] == {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "200Gi"}},
            "storageClassName": "efs-sc",
        }
        assert alpha["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "llm-portal",
            "llm-portal.io/tenant": "alpha",
        }
        assert beta["spec"]["resources"]["requests"]["storage"] == "50Gi"  # the tenant's own size and class
        assert beta["spec"]["storageClassName"] == "fast-rwx"
        world.alpha.refresh_from_db()
        assert world.alpha.model_cache_status["action"] == "created" and world.alpha.model_cache_status["problem"] == ""
        assert sync_kueue() == 0  # present and as large as wanted: nothing written

    def test_no_storage_class_leaves_it_to_the_cluster_default(self, world, cluster_api, cache):
        cache.MODEL_CACHE_STORAGE_CLASS = ""
        sync_kueue(tenant_id=world.alpha.pk)
        assert "storageClassName" not in claim(cluster_api)["spec"]

    def test_without_a_claim_name_nothing_is_created(self, world, cluster_api, cache):
        cache.MODEL_CACHE_PVC = ""
        sync_kueue(tenant_id=world.alpha.pk)
        assert cluster_api.list_objects(k8s.PVC, "alpha") == []
        world.alpha.refresh_from_db()
        assert world.alpha.model_cache_status == {}

    def test_a_larger_size_grows_the_claim_and_a_smaller_one_never_shrinks_it(self, world, cluster_api, cache):
        sync_kueue(tenant_id=world.alpha.pk)
        Tenant.objects.filter(pk=world.alpha.pk).update(model_cache_size_gi=300)
        assert sync_kueue(tenant_id=world.alpha.pk) == 0  # not bound yet: the API server would refuse
        world.alpha.refresh_from_db()
        assert (
            world.alpha.model_cache_status["problem"]
            == "The claim model-cache is Pending: it grows to 300Gi once it is bound."
        )
        bind(cluster_api)
        assert sync_kueue(tenant_id=world.alpha.pk) == 1
        assert claim(cluster_api)["spec"]["resources"]["requests"]["storage"] == "300Gi"
        world.alpha.refresh_from_db()
        assert world.alpha.model_cache_status["action"] == "grown"
        Tenant.objects.filter(pk=world.alpha.pk).update(model_cache_size_gi=10)
        assert sync_kueue(tenant_id=world.alpha.pk) == 0
        assert claim(cluster_api)["spec"]["resources"]["requests"]["storage"] == "300Gi"
        methods = [m for m, p in cluster_api.proxied_requests() if "/persistentvolumeclaims" in p]
        assert "DELETE" not in methods

    def test_a_refused_expansion_keeps_the_claim_and_says_why_on_the_tenant_page(self, world, cluster_api, cache):
        sync_kueue(tenant_id=world.alpha.pk)
        bind(cluster_api)
        Tenant.objects.filter(pk=world.alpha.pk).update(model_cache_size_gi=400)
        # The API server's PersistentVolumeClaimResize admission answers 403 when the class cannot expand.
        cluster_api.inject_faults(
            1.0, (403,), when=lambda method, path: method == "PATCH" and "/persistentvolumeclaims/" in path
        )
        assert sync_kueue(tenant_id=world.alpha.pk) == 0  # the rest of the sync went on
        cluster_api.clear_faults()
        assert claim(cluster_api)["spec"]["resources"]["requests"]["storage"] == "200Gi"
        world.alpha.refresh_from_db()
        problem = world.alpha.model_cache_status["problem"]
        assert "stays at its size" in problem and "allowVolumeExpansion: true" in problem
        page = world.browser("viewer").get("/quotas/alpha/")
        assert "allowVolumeExpansion: true" in page.content.decode()

    def test_another_storage_class_is_not_applied_to_an_existing_claim(self, world, cluster_api, cache):
        sync_kueue(tenant_id=world.alpha.pk)
        Tenant.objects.filter(pk=world.alpha.pk).update(model_cache_storage_class="other-sc")
        sync_kueue(tenant_id=world.alpha.pk)
        assert claim(cluster_api)["spec"]["storageClassName"] == "efs-sc"
        world.alpha.refresh_from_db()
        assert "has storage class efs-sc, not other-sc" in world.alpha.model_cache_status["problem"]

    def test_a_claim_the_api_server_refuses_does_not_stop_the_queues(self, world, cluster_api, cache):
        cluster_api.inject_faults(
            1.0, (422,), when=lambda method, path: method == "POST" and "/persistentvolumeclaims" in path
        )
        sync_kueue(tenant_id=world.alpha.pk)
        cluster_api.clear_faults()
        assert cluster_api.get_object(k8s.LOCALQUEUE, "alpha", "alpha") is not None
        world.alpha.refresh_from_db()
        assert world.alpha.model_cache_status["action"] == "refused"


class TestValidation:
    @pytest.mark.parametrize(
        ("size", "storage_class", "words"),
        [
            (0, "efs", "Claim size 0"),
            (2**20 + 1, "efs", "Claim size"),
            ("100", "efs", "whole number"),
            (True, "efs", "whole number"),
            (10, "EFS_SC", "Storage class 'EFS_SC'"),
            (10, "efs sc", "DNS-1123 subdomain"),
            (10, "a" * 254, "At most 253"),
        ],
    )
    def test_every_field_of_the_claim_is_checked_before_it_is_rendered(self, size, storage_class, words):
        with pytest.raises(ValueError, match=words):
            render_model_cache_claim(
                name="c", namespace="n", tenant_slug="n", size_gi=size, storage_class=storage_class
            )

    def test_the_settings_are_checked_at_start(self, settings):
        settings.MODEL_CACHE_STORAGE_CLASS = "Fast_SC"
        settings.MODEL_CACHE_SIZE_GI = 0
        messages = [error.msg for error in check_kubernetes_names(None)]
        assert any(m.startswith("MODEL_CACHE_STORAGE_CLASS='Fast_SC'") for m in messages)
        assert any(m.startswith("MODEL_CACHE_SIZE_GI=0") for m in messages)
        settings.MODEL_CACHE_STORAGE_CLASS, settings.MODEL_CACHE_SIZE_GI = "", 100
        assert check_kubernetes_names(None) == []

    def test_a_tenant_override_is_checked_like_the_setting(self, world):
        world.alpha.model_cache_storage_class = "Not A Class"
        world.alpha.model_cache_size_gi = 0
        with pytest.raises(ValidationError) as error:
            world.alpha.full_clean()
        assert set(error.value.message_dict) == {"model_cache_storage_class", "model_cache_size_gi"}

    @pytest.mark.parametrize(
        ("quantity", "expected"),
        [
            ("200Gi", 200 * 2**30),
            ("1Ti", 2**40),
            ("500G", 500 * 10**9),
            ("1e3", 1000),
            ("1.5Gi", 3 * 2**29),
            (1024, 1024),
        ],
    )
    def test_quantities_are_read_as_the_api_server_writes_them(self, quantity, expected):
        assert quantity_bytes(quantity) == Decimal(expected)

    @pytest.mark.parametrize("quantity", ["", "Gi", "10 Gi", "10gi", "1.2.3", None, "10Gi\n"])
    def test_a_value_that_is_no_quantity_is_not_read_as_one(self, quantity):
        assert quantity_bytes(quantity) is None


class TestTheTenantsOwnClaim:
    URL = "/api/v1/tenants/alpha/storage/"

    def test_only_platform_admins_set_it_and_everyone_who_sees_the_tenant_reads_it(self, world, cache):
        body = {"model_cache_size_gi": 500, "model_cache_storage_class": "fast-rwx"}
        denied = {"anonymous": (401, 403), "viewer": 403, "member": 403, "tenant_admin": 403, "other_member": 404}
        check_matrix(world, lambda c: c.put(self.URL, body, format="json"), {**denied, "platform_admin": 200})
        readers = {"anonymous": (401, 403), "other_member": 404}
        check_matrix(
            world,
            lambda c: c.get(self.URL),
            {**readers, "viewer": 200, "member": 200, "tenant_admin": 200, "platform_admin": 200},
        )
        answer = world.client("viewer").get(self.URL).json()
        assert (answer["claim"], answer["size_gi"], answer["storage_class"]) == ("model-cache", 500, "fast-rwx")
        (event,) = AuditEvent.objects.filter(action="tenant.storage")
        assert event.changes == {
            "from": {"model_cache_size_gi": None, "model_cache_storage_class": ""},
            "to": {"model_cache_size_gi": 500, "model_cache_storage_class": "fast-rwx"},
        }

    def test_bad_values_are_a_400_with_field_messages(self, world, cache):
        body = {"model_cache_size_gi": 0, "model_cache_storage_class": "Fast RWX"}
        response = world.client("platform_admin").put(self.URL, body, format="json")
        assert response.status_code == 400
        assert set(response.json()) == {"model_cache_size_gi", "model_cache_storage_class"}
        world.alpha.refresh_from_db()
        assert (world.alpha.model_cache_size_gi, world.alpha.model_cache_storage_class) == (None, "")

    def test_the_tenant_page_form_sets_it_and_says_what_is_wrong(self, world, cache):
        browser = world.browser("platform_admin")
        bad = browser.post("/quotas/alpha/storage/", {"storage-model_cache_storage_class": "Bad_Class"})
        assert bad.status_code == 400 and "DNS-1123 subdomain" in bad.content.decode()
        good = {"storage-model_cache_size_gi": "300", "storage-model_cache_storage_class": "fast-rwx"}
        assert browser.post("/quotas/alpha/storage/", good).status_code == 302
        world.alpha.refresh_from_db()
        assert (world.alpha.model_cache_size_gi, world.alpha.model_cache_storage_class) == (300, "fast-rwx")
        assert "300 GiB of fast-rwx" in browser.get("/quotas/alpha/").content.decode()
        assert world.browser("tenant_admin").post("/quotas/alpha/storage/", good).status_code == 403
