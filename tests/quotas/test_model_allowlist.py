"""The tenant policy's model allow-list (quotas.policy): catalog models at their pinned revision
and source patterns. A model the tenant is not allowed is refused by every path that makes a
draft (the browser form, the API, PATCH, the browser edit, a serving profile, a rollback) with
the same message on `model_source`; a gated catalog model without a token is refused too. The
policy's new fields are set in the platform form and the API with the same validation."""

from __future__ import annotations

import pytest
from django.utils import timezone

from catalog.models import CatalogModel
from core.models import AuditEvent
from deployments import services
from deployments.models import ModelDeployment
from deployments.validation import check_draft
from quotas import tenants
from quotas.secret_models import SecretKind, TenantSecret
from tests.deployments.test_ui_parity import form_data
from tests.support.factories import api_draft, draft

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LLAMA = "meta-llama/Meta-Llama-3-8B-Instruct"
QWEN = "Qwen/Qwen2.5-7B-Instruct"
D = "/api/v1/deployments"
REFUSED = f"Team Alpha may not deploy {LLAMA}; its policy allows only sources matching Qwen/*."


def allow(world, *, models=(), patterns=()):
    tenants.tenant_policy_set(
        tenant_id=world.alpha.pk,
        actor=world.users["platform_admin"],
        allowed_flavors=[],
        allowed_models=list(models),
        allowed_source_patterns=list(patterns),
    )
    world.alpha.refresh_from_db()


@pytest.fixture
def running(world):
    """A deployment of LLAMA made before any allow-list: revision 2 serves, 1 can be rolled back to."""
    member = world.users["member"]
    dep = services.deployment_create(tenant=world.alpha, user=member, data=draft(world, max_replicas=1))
    services.deployment_approve(deployment_id=dep.pk, revision=1, approver=world.users["platform_admin"])
    services.deployment_update(deployment_id=dep.pk, user=member, data={"served_model_name": "renamed"})
    dep.refresh_from_db()
    return dep


def _form_create(world):
    data = form_data(ModelDeployment(**{**draft(world), "flavor": world.h100}), tenant=world.alpha.pk)
    page = world.browser("member").post("/deployments/new/", data | {"name": "llama-form", "backend": "kuberay"})
    return page.content.decode()


# (path, how it sends the draft, what it answers: a page to search or the API's model_source list)
PATHS = {
    "form": lambda w, dep: _form_create(w),
    "api": lambda w, dep: w.client("member").post(f"{D}/", api_draft(w, name="llama-api")).json()["model_source"],
    "profile": lambda w, dep: (
        w.client("member")
        .post(f"{D}/", api_draft(w, name="llama-prof", serving_profile="throughput"))
        .json()["model_source"]
    ),
    "patch": lambda w, dep: w.client("member").patch(f"{D}/{dep.pk}/", {"max_model_len": 4096}).json()["model_source"],
    "edit": lambda w, dep: (
        w.browser("member").post(f"/deployments/{dep.pk}/edit/", form_data(dep, max_model_len=4096)).content.decode()
    ),
    "rollback": lambda w, dep: w.client("member").post(f"{D}/{dep.pk}/revisions/1/rollback/").json()["model_source"],
}


class TestEveryPathRefusesTheSame:
    @pytest.mark.parametrize("path", sorted(PATHS))
    def test_a_model_outside_the_allow_list_is_refused(self, world, running, path):
        allow(world, patterns=["Qwen/*"])
        before = (ModelDeployment.objects.count(), running.revisions.count())
        answer = PATHS[path](world, running)
        assert (REFUSED in answer) if isinstance(answer, str) else (answer == [REFUSED])
        assert (ModelDeployment.objects.count(), running.revisions.count()) == before

    def test_the_shared_check_says_it_on_the_source(self, world):
        allow(world, patterns=["Qwen/*"])
        assert check_draft(draft(world), tenant=world.alpha).errors["model_source"] == [REFUSED]
        assert "model_source" not in check_draft(draft(world, model_source=QWEN), tenant=world.alpha).errors


class TestWhatTheListAllows:
    def test_empty_lists_allow_any_model_as_before(self, world):
        assert "model_source" not in check_draft(draft(world), tenant=world.alpha).errors

    def test_a_pattern_allows_what_it_matches(self, world):
        allow(world, patterns=["meta-llama/*", "s3://team-bucket/*"])
        for source in (LLAMA, "s3://team-bucket/llama/8b"):
            assert "model_source" not in check_draft(draft(world, model_source=source), tenant=world.alpha).errors
        errors = check_draft(draft(world, model_source="s3://team-bucket-evil/x"), tenant=world.alpha).errors
        assert "model_source" in errors

    def test_a_catalog_model_allows_its_source_at_its_pinned_revision_only(self, world):
        row = CatalogModel.objects.create(name="llama", display_name="Llama", source=LLAMA, revision=COMMIT)
        allow(world, models=[row])
        pinned = check_draft(draft(world, model_revision=COMMIT), tenant=world.alpha).errors
        assert "model_source" not in pinned
        unpinned = check_draft(draft(world), tenant=world.alpha).errors["model_source"]
        assert unpinned == [
            f"Team Alpha may deploy {LLAMA} only at {COMMIT} (catalog model llama), not at the default branch: "
            "pick the catalog model, or set that revision."
        ]

    def test_deactivating_an_allowed_model_opens_nothing(self, world):
        row = CatalogModel.objects.create(name="llama", display_name="Llama", source=LLAMA, revision=COMMIT)
        allow(world, models=[row])
        CatalogModel.objects.filter(pk=row.pk).update(active=False)
        errors = check_draft(draft(world, model_source=QWEN), tenant=world.alpha).errors
        assert errors["model_source"] == [f"Team Alpha may not deploy {QWEN}; its policy allows only no model."]

    def test_the_api_fills_source_and_revision_from_the_catalog_and_the_engine_gets_it(self, world):
        row = CatalogModel.objects.create(name="llama", display_name="Llama", source=LLAMA, revision=COMMIT)
        allow(world, models=[row])
        body = api_draft(world, name="pinned", catalog_model="llama")
        del body["model_source"]
        response = world.client("member").post(f"{D}/", body)
        assert response.status_code == 201, response.json()
        dep = ModelDeployment.objects.get(name="pinned")
        assert (dep.model_source, dep.model_revision) == (LLAMA, COMMIT)
        assert response.json()["model_revision"] == COMMIT
        manifest = world.client("member").get(f"{D}/{dep.pk}/manifest/").content.decode()
        assert f"revision: {COMMIT}" in manifest
        page = world.browser("member").get(f"/deployments/{dep.pk}/").content.decode()
        assert f"<code>{COMMIT}</code> (pinned)" in page

    def test_a_catalog_model_and_another_source_in_one_request_is_a_400(self, world):
        CatalogModel.objects.create(name="llama", display_name="Llama", source=LLAMA, revision=COMMIT)
        response = world.client("member").post(f"{D}/", api_draft(world, catalog_model="llama", model_source=QWEN))
        assert response.status_code == 400 and "catalog model llama sets this" in response.json()["model_source"][0]

    def test_a_new_source_without_a_revision_drops_the_old_revision(self, world):
        CatalogModel.objects.create(name="llama", display_name="Llama", source=LLAMA, revision=COMMIT)
        body = api_draft(world, name="pinned", catalog_model="llama")
        del body["model_source"]
        dep_id = world.client("member").post(f"{D}/", body).json()["id"]
        response = world.client("member").patch(f"{D}/{dep_id}/", {"model_source": QWEN})
        assert response.status_code == 200, response.json()
        assert ModelDeployment.objects.get(pk=dep_id).model_revision == ""


class TestGated:
    @pytest.fixture
    def gated(self, db):
        return CatalogModel.objects.create(
            name="llama", display_name="Llama 3", source=LLAMA, revision=COMMIT, gated=True
        )

    def test_a_gated_model_without_any_token_is_refused_on_the_token(self, world, gated):
        errors = check_draft(draft(world, model_revision=COMMIT), tenant=world.alpha).errors
        assert errors["hf_token_secret"][0].startswith("Llama 3 is gated on Hugging Face and Team Alpha has no token")
        api = world.client("member").post(f"{D}/", api_draft(world, name="gated"))
        assert api.status_code == 400 and api.json()["hf_token_secret"] == errors["hf_token_secret"]

    def test_the_tenants_token_or_a_named_secret_opens_it(self, world, gated):
        named = check_draft(draft(world, hf_token_secret="my-token"), tenant=world.alpha).errors
        assert "hf_token_secret" not in named
        TenantSecret.objects.create(
            tenant=world.alpha, kind=SecretKind.HF_TOKEN, fingerprint="abcd", set_at=timezone.now()
        )
        assert "hf_token_secret" not in check_draft(draft(world), tenant=world.alpha).errors


class TestSettingTheList:
    URL = "/api/v1/tenants/alpha/policy/"
    BODY = {"auto_approve_max_gpus": 0, "max_gpus_per_deployment": 0, "allowed_flavors": []}

    def test_the_api_sets_models_and_patterns_and_audits_them(self, world):
        CatalogModel.objects.create(name="llama", display_name="Llama", source=LLAMA, revision=COMMIT)
        body = self.BODY | {"allowed_models": ["llama"], "allowed_source_patterns": ["Qwen/*", " Qwen/* "]}
        response = world.client("platform_admin").put(self.URL, body)
        assert response.status_code == 200, response.json()
        assert response.json()["allowed_models"] == ["llama"]
        assert response.json()["allowed_source_patterns"] == ["Qwen/*"]
        event = AuditEvent.objects.filter(action="tenant.policy").latest("pk")
        assert event.changes["to"]["allowed_models"] == ["llama"]
        assert event.changes["to"]["allowed_source_patterns"] == ["Qwen/*"]

    def test_a_bad_pattern_gets_the_same_message_in_the_api_and_the_form(self, world):
        api = world.client("platform_admin").put(self.URL, self.BODY | {"allowed_source_patterns": ["ok/*", "a b"]})
        assert api.status_code == 400
        message = api.json()["allowed_source_patterns"][0]
        assert message.startswith("Line 2")
        form = {
            "form": "policy",
            "policy-auto_approve_max_gpus": 0,
            "policy-max_gpus_per_deployment": 0,
            "policy-allowed_source_patterns": "ok/*\na b",
        }
        page = world.browser("platform_admin").post("/platform/tenants/alpha/", form).content.decode()
        assert message.replace("'", "&#x27;") in page
        world.alpha.refresh_from_db()
        assert world.alpha.allowed_source_patterns == []

    def test_the_form_sets_the_list(self, world):
        row = CatalogModel.objects.create(name="llama", display_name="Llama", source=LLAMA, revision=COMMIT)
        form = {
            "form": "policy",
            "policy-auto_approve_max_gpus": 0,
            "policy-max_gpus_per_deployment": 0,
            "policy-allowed_models": [row.pk],
            "policy-allowed_source_patterns": "Qwen/*\ns3://team-bucket/*",
        }
        response = world.browser("platform_admin").post("/platform/tenants/alpha/", form)
        assert response.status_code == 302
        world.alpha.refresh_from_db()
        assert list(world.alpha.allowed_models.all()) == [row]
        assert world.alpha.allowed_source_patterns == ["Qwen/*", "s3://team-bucket/*"]

    def test_members_cannot_set_it(self, world):
        response = world.client("tenant_admin").put(self.URL, self.BODY | {"allowed_source_patterns": ["x/*"]})
        assert response.status_code == 403
