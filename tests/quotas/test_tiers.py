"""Priority tiers (issue 35): the services (platform admins only, audited, mirrored to Kueue on
commit, the name fixed, a tier in use kept, row locks against concurrent requests and policy
changes), and the API and the pages that call them. The tenant policy's tiers:
tests/quotas/test_tier_policy.py."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from html import unescape

import pytest
from django.db import connection, transaction

from core.exceptions import ConflictError, DomainError, Forbidden
from core.models import AuditEvent
from deployments import services as deployment_services
from deployments.models import ModelDeployment
from quotas import tenants, tiers
from quotas.models import PriorityTier, Tenant
from quotas.policy import policy_summary
from runtime import k8s
from tests.support.factories import api_draft, draft

API = "/api/v1/priority-tiers/"
ADMIN_ROLES_REFUSED = ("viewer", "member", "tenant_admin", "other_member")


@pytest.fixture
def eager(monkeypatch):
    """Tasks run in this process when their commit hook fires (as a worker would run them)."""
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)


@pytest.fixture
def standard(world) -> PriorityTier:
    return PriorityTier.objects.create(name="standard", display_name="Standard", value=100)


@pytest.fixture
def production(world) -> PriorityTier:
    return PriorityTier.objects.create(name="production", display_name="Production", value=1000)


def deployment_with(world, tier: str, *, tenant=None, state: str = "pending_approval") -> ModelDeployment:
    """A deployment of `tenant` (alpha) that names `tier`, in `state`."""
    tenant = tenant or world.alpha
    user = world.users["member" if tenant == world.alpha else "other_member"]
    name = f"d{ModelDeployment.objects.count()}"
    dep = deployment_services.deployment_create(tenant=tenant, user=user, data=draft(world, name=name))
    ModelDeployment.objects.filter(pk=dep.pk).update(priority_tier=tier, state=state)
    return dep


def actions(**filters) -> list[str]:
    return list(AuditEvent.objects.filter(**filters).order_by("pk").values_list("action", flat=True))


class TestServices:
    def test_a_tier_reaches_kueue_only_on_commit_and_every_change_is_audited(
        self, world, cluster_api, eager, django_capture_on_commit_callbacks
    ):
        admin = world.users["platform_admin"]
        with django_capture_on_commit_callbacks(execute=True):
            tier = tiers.tier_create(
                actor=admin, name="standard", display_name="Standard", value=100, description="Most work."
            )
            assert cluster_api.get_object(k8s.WORKLOADPRIORITYCLASS, "llm-portal-standard") is None
        made = cluster_api.get_object(k8s.WORKLOADPRIORITYCLASS, "llm-portal-standard")
        assert (made["value"], made["description"]) == (100, "Most work.")
        with django_capture_on_commit_callbacks(execute=True):
            tiers.tier_update(actor=admin, name="standard", values={"value": 250}, reason="above batch")
        assert cluster_api.get_object(k8s.WORKLOADPRIORITYCLASS, "llm-portal-standard")["value"] == 250
        with django_capture_on_commit_callbacks(execute=True):
            tiers.tier_delete(actor=admin, name="standard", reason="merged")
        assert cluster_api.get_object(k8s.WORKLOADPRIORITYCLASS, "llm-portal-standard") is None
        events = list(AuditEvent.objects.filter(object_id=str(tier.pk), action__startswith="tier.").order_by("pk"))
        assert [e.action for e in events] == ["tier.create", "tier.update", "tier.delete"]
        assert events[0].changes["to"] == {
            "name": "standard",
            "display_name": "Standard",
            "value": 100,
            "description": "Most work.",
        }
        assert events[1].changes == {"from": {"value": 100}, "to": {"value": 250}}
        assert (events[1].reason, events[2].reason) == ("above batch", "merged")
        assert all(e.actor == admin for e in events)

    def test_the_name_is_fixed_and_an_unchanged_save_writes_nothing(
        self, world, standard, django_capture_on_commit_callbacks
    ):
        admin = world.users["platform_admin"]
        with pytest.raises(DomainError) as refused:
            tiers.tier_update(actor=admin, name="standard", values={"name": "normal", "value": 5})
        assert (refused.value.field, refused.value.code, refused.value.status_code) == ("name", "immutable", 400)
        with django_capture_on_commit_callbacks() as scheduled:
            same = tiers.tier_update(actor=admin, name="standard", values={"name": "standard", "value": 100})
        assert same.value == 100 and scheduled == [] and actions() == []
        standard.refresh_from_db()
        assert (standard.name, standard.value) == ("standard", 100)

    @pytest.mark.parametrize(
        ("values", "field"),
        [
            ({"name": "Upper_Case"}, "name"),
            ({"name": "-dash"}, "name"),
            ({"name": "a" * 41}, "name"),
            ({"name": "nul\x00l"}, "name"),
            ({"value": 1_000_000_001}, "value"),
            ({"value": -1_000_000_001}, "value"),
            ({"value": True}, "value"),
            ({"display_name": ""}, "display_name"),
            ({"display_name": "   "}, "display_name"),
            ({"display_name": "x" * 101}, "display_name"),
            ({"display_name": "a\x00b"}, "display_name"),
            ({"description": "x" * 301}, "description"),
        ],
    )
    def test_bad_values_are_refused_on_their_field_and_nothing_is_written(
        self, world, values, field, django_capture_on_commit_callbacks
    ):
        good = {"name": "batch", "display_name": "Batch", "value": 1, "description": ""}
        with django_capture_on_commit_callbacks() as scheduled, pytest.raises(DomainError) as refused:
            tiers.tier_create(actor=world.users["platform_admin"], **{**good, **values})
        assert (refused.value.field, refused.value.status_code) == (field, 400)
        assert not PriorityTier.objects.exists() and scheduled == [] and actions() == []

    def test_a_second_tier_of_the_same_name_is_a_400_on_the_name(self, world, standard):
        with pytest.raises(DomainError) as refused:
            tiers.tier_create(actor=world.users["platform_admin"], name="standard", display_name="Again", value=1)
        assert (refused.value.field, refused.value.status_code) == ("name", 400)
        assert PriorityTier.objects.get().display_name == "Standard"

    def test_only_platform_admins_manage_tiers(self, world, standard):
        for role in ADMIN_ROLES_REFUSED:
            user = world.users[role]
            with pytest.raises(Forbidden):
                tiers.tier_create(actor=user, name="batch", display_name="Batch", value=1)
            with pytest.raises(Forbidden):
                tiers.tier_update(actor=user, name="standard", values={"value": 1})
            with pytest.raises(Forbidden):
                tiers.tier_delete(actor=user, name="standard")
        assert list(PriorityTier.objects.values_list("name", "value")) == [("standard", 100)]

    def test_a_tier_a_deployment_names_is_kept_until_none_does(self, world, standard):
        admin = world.users["platform_admin"]
        in_beta = deployment_with(world, "standard", tenant=world.beta, state="stopped")
        with pytest.raises(ConflictError) as refused:
            tiers.tier_delete(actor=admin, name="standard")
        assert (refused.value.status_code, refused.value.code) == (409, "in_use")
        assert refused.value.message == (
            "1 deployment uses the priority tier 'standard': change their tier or delete them first."
        )
        ModelDeployment.objects.filter(pk=in_beta.pk).update(state="deleted")  # names nothing any more
        deployment_with(world, "production")  # another tier's deployment is no reason to keep this one
        tiers.tier_delete(actor=admin, name="standard")
        assert not PriorityTier.objects.filter(name="standard").exists()

    def test_deleting_takes_the_tier_out_of_every_policy_and_audits_each_change(self, world, standard, production):
        world.alpha.allowed_tiers.set([standard, production])
        world.alpha.auto_approve_tiers.set([standard])
        world.beta.allowed_tiers.set([production])
        tiers.tier_delete(actor=world.users["platform_admin"], name="standard", reason="merged")
        alpha = Tenant.objects.get(slug="alpha")
        assert (policy_summary(alpha)["allowed_tiers"], policy_summary(alpha)["auto_approve_tiers"]) == (
            ["production"],
            [],
        )
        change = AuditEvent.objects.get(action="tenant.policy", tenant=world.alpha)
        assert change.changes["from"]["allowed_tiers"] == ["production", "standard"]
        assert change.changes["to"]["allowed_tiers"] == ["production"]
        assert (change.changes["from"]["auto_approve_tiers"], change.changes["to"]["auto_approve_tiers"]) == (
            ["standard"],
            [],
        )
        assert change.reason == "merged"
        assert not AuditEvent.objects.filter(action="tenant.policy", tenant=world.beta).exists()  # it kept its set
        # The tier is gone for requests too: the deployment rules find it allowed nowhere.
        response = world.client("member").post(
            "/api/v1/deployments/", api_draft(world, priority_tier="standard"), format="json"
        )
        assert response.status_code == 400 and "priority_tier" in response.json()


class TestRaces:
    """Real commits: row locks order a tier's deletion against what names it meanwhile."""

    pytestmark = pytest.mark.django_db(transaction=True)

    def test_a_request_naming_the_tier_holds_its_deletion_back_until_it_commits(self, tx_world):
        tier = PriorityTier.objects.create(name="standard", display_name="Standard", value=100)
        tx_world.alpha.allowed_tiers.set([tier])
        requested, deleting = threading.Event(), threading.Event()

        def request():
            try:
                with transaction.atomic():
                    deployment_services.deployment_create(
                        tenant=tx_world.alpha,
                        user=tx_world.users["member"],
                        data=draft(tx_world, priority_tier="standard"),
                    )
                    requested.set()
                    deleting.wait(10)
                    time.sleep(0.5)  # the deletion is now waiting for the tenant's row (or, unlocked, done)
                return "requested"
            finally:
                connection.close()

        def delete():
            requested.wait(10)
            deleting.set()
            try:
                tiers.tier_delete(actor=tx_world.users["platform_admin"], name="standard")
                return "deleted"
            except ConflictError as error:
                return error.code
            finally:
                connection.close()

        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(request), pool.submit(delete)]
            outcomes = [future.result(30) for future in futures]
        assert outcomes == ["requested", "in_use"]
        assert ModelDeployment.objects.get().priority_tier == "standard"
        assert PriorityTier.objects.filter(name="standard").exists()

    def test_a_policy_naming_a_tier_deleted_meanwhile_is_refused_on_its_field(self, tx_world):
        PriorityTier.objects.create(name="standard", display_name="Standard", value=100)
        deleted, setting = threading.Event(), threading.Event()

        def delete():
            try:
                with transaction.atomic():
                    tiers.tier_delete(actor=tx_world.users["platform_admin"], name="standard")
                    deleted.set()
                    setting.wait(10)
                    time.sleep(0.5)  # the policy change is now waiting for the tier's row
                return "deleted"
            finally:
                connection.close()

        def set_policy():
            deleted.wait(10)
            setting.set()
            try:
                tenants.tenant_policy_set(
                    tenant_id=tx_world.alpha.pk,
                    actor=tx_world.users["platform_admin"],
                    allowed_flavors=[],
                    allowed_tiers=["standard"],
                )
                return "set"
            except DomainError as error:
                return error.field
            finally:
                connection.close()

        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(delete), pool.submit(set_policy)]
            outcomes = [future.result(30) for future in futures]
        assert outcomes == ["deleted", "allowed_tiers"]
        assert not Tenant.objects.get(pk=tx_world.alpha.pk).allowed_tiers.exists()


class TestApi:
    def test_everyone_signed_in_reads_the_tiers_with_the_deployments_they_can_see(self, world, standard, production):
        deployment_with(world, "standard")
        deployment_with(world, "standard", state="deleted")  # counted nowhere
        rows = {role: world.client(role).get(API).json() for role in ("member", "other_member", "platform_admin")}
        rows = {role: body["results"] if isinstance(body, dict) else body for role, body in rows.items()}
        assert [r["name"] for r in rows["member"]] == ["production", "standard"]  # highest value first
        standard_row = next(r for r in rows["member"] if r["name"] == "standard")
        assert standard_row == {
            "name": "standard",
            "display_name": "Standard",
            "value": 100,
            "description": "",
            "class_name": "llm-portal-standard",
            "deployments": 1,
            "created": standard_row["created"],
        }
        assert {r["name"]: r["deployments"] for r in rows["other_member"]} == {"production": 0, "standard": 0}
        assert {r["name"]: r["deployments"] for r in rows["platform_admin"]} == {"production": 0, "standard": 1}
        assert world.client("viewer").get(f"{API}standard/").json()["class_name"] == "llm-portal-standard"
        assert world.client("anonymous").get(API).status_code == 401

    def test_platform_admins_create_change_and_delete_and_others_are_refused(self, world):
        body = {"name": "batch", "display_name": "Batch", "value": 10, "description": "Overnight", "reason": "new"}
        for role in ADMIN_ROLES_REFUSED:
            assert world.client(role).post(API, body, format="json").status_code == 403
        assert not PriorityTier.objects.exists()
        admin = world.client("platform_admin")
        created = admin.post(API, body, format="json")
        assert created.status_code == 201 and created.json()["class_name"] == "llm-portal-batch"
        assert "reason" not in created.json()
        changed = admin.patch(f"{API}batch/", {"value": 20, "reason": "above idle"}, format="json")
        assert changed.status_code == 200 and changed.json()["value"] == 20
        whole = {"name": "batch", "display_name": "Batch jobs", "value": 30, "description": ""}
        assert admin.put(f"{API}batch/", whole, format="json").json()["display_name"] == "Batch jobs"
        assert world.client("member").patch(f"{API}batch/", {"value": 1}, format="json").status_code == 403
        assert admin.delete(f"{API}batch/").status_code == 204
        assert not PriorityTier.objects.exists()
        assert actions(action__startswith="tier.") == ["tier.create", "tier.update", "tier.update", "tier.delete"]
        assert AuditEvent.objects.get(action="tier.update", reason="above idle").changes["to"] == {"value": 20}

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            ({"name": "Not_A_Label"}, "name"),
            ({"name": "a" * 41}, "name"),
            ({"name": "nul\x00name"}, "name"),
            ({"name": "x" * 10_000}, "name"),
            ({"name": ""}, "name"),
            ({"value": 1_000_000_001}, "value"),
            ({"value": -1_000_000_001}, "value"),
            ({"value": 2**64}, "value"),
            ({"value": "12abc"}, "value"),
            ({"value": True}, "value"),
            ({"value": None}, "value"),
            ({"display_name": "a\x00b"}, "display_name"),
            ({"display_name": "x" * 10_000}, "display_name"),
            ({"description": "x" * 301}, "description"),
            ({"description": "\x00"}, "description"),
            ({"reason": "x" * 2001}, "reason"),
        ],
    )
    def test_a_bad_body_is_a_400_on_its_field_and_writes_nothing(self, world, change, field):
        body = {"name": "batch", "display_name": "Batch", "value": 10, **change}
        response = world.client("platform_admin").post(API, body, format="json")
        assert response.status_code == 400, response.content
        assert response.json()[field], response.json()
        assert not PriorityTier.objects.exists() and actions() == []

    def test_a_duplicate_name_is_a_400_and_renaming_is_a_400_on_the_name(self, world, standard):
        admin = world.client("platform_admin")
        again = admin.post(API, {"name": "standard", "display_name": "Again", "value": 1}, format="json")
        assert again.status_code == 400 and again.json()["name"]
        renamed = admin.patch(f"{API}standard/", {"name": "normal"}, format="json")
        assert renamed.status_code == 400
        assert renamed.json()["name"] == [
            "A priority tier's name cannot change: it names the Kueue WorkloadPriorityClass and deployments and "
            "tenant policies refer to it. Create a new tier instead."
        ]
        put = admin.put(f"{API}standard/", {"name": "normal", "display_name": "S", "value": 1}, format="json")
        assert put.status_code == 400 and put.json()["name"]
        assert list(PriorityTier.objects.values_list("name", "display_name", "value")) == [
            ("standard", "Standard", 100)
        ]

    def test_deleting_a_tier_in_use_is_a_409_that_says_why(self, world, standard):
        deployment_with(world, "standard")
        response = world.client("platform_admin").delete(f"{API}standard/")
        assert response.status_code == 409
        assert response.json() == {
            "detail": "1 deployment uses the priority tier 'standard': change their tier or delete them first.",
            "code": "in_use",
        }
        assert PriorityTier.objects.filter(name="standard").exists()

    def test_an_unknown_tier_is_a_404(self, world):
        assert world.client("member").get(f"{API}nope/").status_code == 404
        assert world.client("platform_admin").delete(f"{API}nope/").status_code == 404

    def test_the_schema_describes_the_endpoint_and_its_fields(self, world):
        schema = world.client("member").get("/api/schema/", HTTP_ACCEPT="application/json").json()
        assert set(schema["paths"]["/api/v1/priority-tiers/"]) >= {"get", "post"}
        assert set(schema["paths"]["/api/v1/priority-tiers/{name}/"]) >= {"get", "put", "patch", "delete"}
        answer = schema["components"]["schemas"]["PriorityTier"]["properties"]
        request = schema["components"]["schemas"]["PriorityTierRequest"]["properties"]
        for name in ("name", "display_name", "value", "description", "class_name", "deployments"):
            assert answer[name].get("description"), name
        assert request["reason"]["description"] == "Why: kept in the audit log."
        assert (request["value"]["minimum"], request["value"]["maximum"]) == (-1_000_000_000, 1_000_000_000)
        assert "reason" not in answer and not {"class_name", "deployments", "created"} & set(request)


class TestPages:
    def test_the_list_is_read_only_for_everyone_but_platform_admins(self, world, standard):
        deployment_with(world, "standard")
        assert world.browser("anonymous").get("/platform/tiers/").status_code == 302
        for role in ("viewer", "member", "tenant_admin", "other_member"):
            page = world.browser(role).get("/platform/tiers/")
            assert page.status_code == 200
            html = page.content.decode()
            assert "<code>llm-portal-standard</code>" in html
            assert "/platform/tiers/standard/" not in html and "New priority tier" not in html
        admin = world.browser("platform_admin").get("/platform/tiers/").content.decode()
        assert 'href="/platform/tiers/standard/"' in admin and 'href="/platform/tiers/standard/delete/"' in admin
        assert "New priority tier" in admin
        member_row = row(world.browser("member").get("/platform/tiers/"), "standard")
        assert re.search(r"<td data-deployments>1</td>", member_row)
        assert re.search(
            r"<td data-deployments>0</td>", row(world.browser("other_member").get("/platform/tiers/"), "standard")
        )

    def test_changing_pages_and_posts_are_for_platform_admins_only(self, world, standard):
        for url in ("/platform/tiers/standard/", "/platform/tiers/standard/delete/"):
            assert world.browser("anonymous").get(url).status_code == 302
            for role in ADMIN_ROLES_REFUSED:
                assert world.browser(role).get(url).status_code == 403
            assert world.browser("platform_admin").get(url).status_code == 200
        for role in ADMIN_ROLES_REFUSED:
            client = world.browser(role)
            assert client.post("/platform/tiers/", {"name": "x", "display_name": "X", "value": 1}).status_code == 403
            assert client.post("/platform/tiers/standard/", {"display_name": "X", "value": 1}).status_code == 403
            assert client.post("/platform/tiers/standard/delete/", {}).status_code == 403
        assert list(PriorityTier.objects.values_list("name", "display_name")) == [("standard", "Standard")]

    def test_create_change_and_delete_in_the_browser(self, world):
        admin = world.browser("platform_admin")
        bad = admin.post("/platform/tiers/", {"name": "batch", "display_name": "Batch", "value": 2_000_000_000})
        assert bad.status_code == 200 and 'id="id_value_error"' in bad.content.decode()
        assert not PriorityTier.objects.exists()
        made = admin.post("/platform/tiers/", {"name": "batch", "display_name": "Batch", "value": 5, "reason": "new"})
        assert made.status_code == 302 and made["Location"] == "/platform/tiers/"
        # The name is shown but fixed: a posted one is ignored, the tier keeps its own.
        edited = admin.post("/platform/tiers/batch/", {"name": "other", "display_name": "Batch jobs", "value": 7})
        assert edited.status_code == 302
        assert list(PriorityTier.objects.values_list("name", "display_name", "value")) == [("batch", "Batch jobs", 7)]
        dep = deployment_with(world, "batch")
        refused = admin.post("/platform/tiers/batch/delete/", {"reason": "unused"})
        assert refused.status_code == 200
        assert "1 deployment uses the priority tier 'batch'" in unescape(refused.content.decode())
        assert PriorityTier.objects.filter(name="batch").exists()
        ModelDeployment.objects.filter(pk=dep.pk).update(state="deleted")
        gone = admin.post("/platform/tiers/batch/delete/", {"reason": "unused"})
        assert gone.status_code == 302 and not PriorityTier.objects.exists()
        assert actions(action__startswith="tier.") == ["tier.create", "tier.update", "tier.delete"]

    def test_the_delete_page_says_what_happens(self, world, standard):
        world.alpha.allowed_tiers.set([standard])
        html = world.browser("platform_admin").get("/platform/tiers/standard/delete/").content.decode()
        assert "No deployment uses this tier" in html and "no longer allow the tier: Team Alpha." in html
        deployment_with(world, "standard")
        html = world.browser("platform_admin").get("/platform/tiers/standard/delete/").content.decode()
        assert 'data-in-use="1"' in html

    def test_the_platform_and_quota_pages_link_the_tiers(self, world):
        assert 'href="/platform/tiers/"' in world.browser("platform_admin").get("/platform/").content.decode()
        assert 'href="/platform/tiers/"' in world.browser("viewer").get("/quotas/alpha/").content.decode()


def row(response, name: str) -> str:
    return re.search(rf'<tr data-tier="{name}">.*?</tr>', response.content.decode(), re.S).group(0)
