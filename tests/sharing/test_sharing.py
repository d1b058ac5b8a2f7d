"""Shared models (issue 34): alpha publishes a deployment, beta subscribes and reaches it on its own
endpoint with its own keys. Every action is checked against sharing.permissions (one table, walked
here per role and state over the API), a collision of served names is refused, narrowing the
audience or unpublishing ends subscriptions, and the tenant endpoint's /v1/models lists the model."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from access.services import key_mint
from core.models import AuditEvent
from deployments import services as deployments
from deployments.models import ModelDeployment
from quotas.actors import Actor
from quotas.models import Membership
from sharing import services
from sharing.models import Subscription, SubscriptionState
from sharing.permissions import CLOSED, OPEN, PERMISSIONS, ShareAction, Side, allowed
from tests.support.factories import draft

P, S = "/api/v1/publications/", "/api/v1/subscriptions/"


@pytest.fixture
def beta_admin(world) -> User:
    user = User.objects.create_user("beta-admin")
    Membership.objects.create(user=user, tenant=world.beta, role="tenant_admin")
    return user


def running(world, tenant, name, served, state="ready") -> ModelDeployment:
    user = world.users["member"] if tenant == world.alpha else world.users["other_member"]
    dep = deployments.deployment_create(
        tenant=tenant, user=user, data=draft(world, name=name, served_model_name=served)
    )
    ModelDeployment.objects.filter(pk=dep.pk).update(state=state)
    return ModelDeployment.objects.get(pk=dep.pk)


@pytest.fixture
def chat(world) -> ModelDeployment:
    return running(world, world.alpha, "chat", "llama3-8b")


def client(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


def publish(world, dep, **body):
    return client(world.users["tenant_admin"]).post(P, {"deployment": dep.pk, **body}, format="json")


def test_the_table_lets_only_each_sides_admins_act_and_only_in_its_states():
    for action, rule in PERMISSIONS.items():
        for actor in Actor:
            for state in [None, *SubscriptionState.values, "published", "unpublished"]:
                expected = actor in {Actor.TENANT_ADMIN, Actor.PLATFORM_ADMIN} and state in rule.states
                assert allowed(actor, action, state) is expected, (action, actor, state)
    assert (
        PERMISSIONS[ShareAction.SUBSCRIBE].side == Side.CONSUMER
        and PERMISSIONS[ShareAction.SUBSCRIBE].states == {None} | CLOSED
    )
    assert PERMISSIONS[ShareAction.CANCEL].states == OPEN and PERMISSIONS[ShareAction.APPROVE].side == Side.OWNER


@pytest.mark.parametrize(
    ("role", "status"),
    [
        ("anonymous", 401),
        ("viewer", 403),
        ("member", 403),
        ("other_member", 400),
        ("tenant_admin", 200),
        ("platform_admin", 200),
    ],
)
def test_publishing_is_for_the_owners_admins(world, chat, role, status):
    response = world.client(role).post(P, {"deployment": chat.pk, "tenants": ["beta"]}, format="json")
    assert response.status_code == status, response.content
    if status == 400:  # another tenant's deployment reads as missing
        assert response.json()["deployment"] == ["No such deployment."]


def test_publish_subscribe_approve_and_the_tenant_endpoint_lists_it(world, chat, beta_admin):
    body = publish(world, chat, tenants=["beta"], tokens_per_minute=1000).json()
    assert (body["owner"], body["model"], body["tenants"], body["tokens_per_minute"]) == (
        "alpha",
        "llama3-8b",
        ["beta"],
        1000,
    )
    # beta's member sees the offer and may not subscribe; beta's admin asks
    assert [p["model"] for p in world.client("other_member").get(P).json()["results"]] == ["llama3-8b"]
    assert (
        world.client("other_member").post(S, {"tenant": "beta", "deployment": chat.pk}, format="json").status_code
        == 403
    )
    asked = client(beta_admin).post(S, {"tenant": "beta", "deployment": chat.pk}, format="json")
    assert asked.status_code == 201 and asked.json()["state"] == "requested"
    sub = asked.json()["id"]
    key = key_mint(user=beta_admin, tenant=world.beta, name="k")[1]
    models = APIClient()
    models.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert models.get("/api/v1/gateway/beta/models").json()["data"] == []  # not before approval
    # the consumer cannot approve itself; the owner's admin approves with beta's own limit
    assert client(beta_admin).post(f"{S}{sub}/approve/", {}, format="json").status_code == 403
    approved = world.client("tenant_admin").post(f"{S}{sub}/approve/", {"requests_per_minute": 5}, format="json")
    assert approved.status_code == 200, approved.content
    assert (approved.json()["state"], approved.json()["tokens_per_minute"], approved.json()["requests_per_minute"]) == (
        "active",
        1000,
        5,
    )
    listed = models.get("/api/v1/gateway/beta/models").json()["data"]
    assert [(m["id"], m["owned_by"]) for m in listed] == [("llama3-8b", "alpha")]
    # approving twice is a state conflict, not a second approval
    again = world.client("tenant_admin").post(f"{S}{sub}/approve/", {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "invalid_transition"
    actions = list(
        AuditEvent.objects.filter(action__startswith="sharing.").order_by("pk").values_list("action", flat=True)
    )
    assert actions == ["sharing.publish", "sharing.subscribe", "sharing.approve"]


def test_a_policy_approves_at_once_and_a_deployment_key_never_sees_shared_models(world, chat, beta_admin):
    publish(world, chat, to_all=True, auto_approve=True, requests_per_minute=3)
    sub = services.subscribe(user=beta_admin, consumer=world.beta, deployment_id=chat.pk)
    assert (sub.state, sub.requests_per_minute, sub.decided_by) == ("active", 3, None)
    assert AuditEvent.objects.filter(action="sharing.approve", actor_name="policy").count() == 1
    own = running(world, world.beta, "beta-chat", "beta-model")
    scoped = key_mint(user=beta_admin, tenant=world.beta, name="d", deployment_id=own.pk)[1]
    wide = key_mint(user=beta_admin, tenant=world.beta, name="w")[1]
    for key, expected in ((scoped, ["beta-model"]), (wide, ["beta-model", "llama3-8b"])):
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        assert [m["id"] for m in c.get("/api/v1/gateway/beta/models").json()["data"]] == expected


def test_a_name_the_consumer_serves_is_refused(world, chat, beta_admin):
    running(world, world.beta, "mine", "llama3-8b")
    publish(world, chat, tenants=["beta"])
    refused = client(beta_admin).post(S, {"tenant": "beta", "deployment": chat.pk}, format="json")
    assert refused.status_code == 400
    assert refused.json()["deployment"] == ["Your tenant serves a model named llama3-8b already."]
    assert not Subscription.objects.exists()


def test_not_offered_is_the_same_400_as_missing(world, chat, beta_admin):
    gamma = world.alpha.__class__.objects.create(slug="gamma", display_name="Gamma")
    publish(world, chat, tenants=["gamma"])
    for deployment in (chat.pk, 999_999):
        response = client(beta_admin).post(S, {"tenant": "beta", "deployment": deployment}, format="json")
        assert response.status_code == 400 and "deployment" in response.json()
    assert gamma.subscriptions.count() == 0


def test_narrowing_the_audience_and_unpublishing_end_subscriptions(world, chat, beta_admin):
    gamma = world.alpha.__class__.objects.create(slug="gamma", display_name="Gamma")
    gamma_admin = User.objects.create_user("gamma-admin")
    Membership.objects.create(user=gamma_admin, tenant=gamma, role="tenant_admin")
    publish(world, chat, tenants=["beta", "gamma"], auto_approve=True)
    b = services.subscribe(user=beta_admin, consumer=world.beta, deployment_id=chat.pk)
    g = services.subscribe(user=gamma_admin, consumer=gamma, deployment_id=chat.pk)
    assert publish(world, chat, tenants=["gamma"], auto_approve=True).status_code == 200
    b.refresh_from_db(), g.refresh_from_db()
    assert (b.state, g.state) == ("ended", "active")
    pub = chat.publication
    assert world.client("tenant_admin").post(f"{P}{pub.pk}/unpublish/", {}, format="json").status_code == 200
    g.refresh_from_db()
    assert g.state == "ended"
    again = world.client("tenant_admin").post(f"{P}{pub.pk}/unpublish/", {}, format="json")
    assert again.status_code == 409


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tenants": []}, "tenants"),
        ({"tenants": ["nobody"]}, "tenants"),
        ({"tenants": ["alpha"]}, "tenants"),  # its own tenant is no audience
        ({"tenants": ["Bad Slug!"]}, "tenants"),
        ({"tenants": ["beta"], "tokens_per_minute": 0}, "tokens_per_minute"),
        ({"tenants": ["beta"], "requests_per_minute": "many"}, "requests_per_minute"),
        ({"tenants": ["beta"], "tokens_per_minute": 10**12}, "tokens_per_minute"),
    ],
)
def test_bad_publications_are_400_on_the_field_and_write_nothing(world, chat, body, field):
    response = publish(world, chat, **body)
    assert response.status_code == 400 and field in response.json(), response.content
    assert not chat.__class__.objects.get(pk=chat.pk).__dict__.get("publication")
    assert AuditEvent.objects.filter(action__startswith="sharing.").count() == 0


def test_the_consumer_cancels_and_asks_again_the_owner_refuses_and_ends(world, chat, beta_admin):
    publish(world, chat, tenants=["beta"])
    sub = services.subscribe(user=beta_admin, consumer=world.beta, deployment_id=chat.pk)
    owner, consumer = world.client("tenant_admin"), client(beta_admin)
    assert owner.post(f"{S}{sub.pk}/refuse/").json()["state"] == "refused"
    assert consumer.post(f"{S}{sub.pk}/cancel/").status_code == 409  # nothing open to cancel
    assert consumer.post(S, {"tenant": "beta", "deployment": chat.pk}, format="json").json()["state"] == "requested"
    assert owner.post(f"{S}{sub.pk}/approve/").json()["state"] == "active"
    assert (
        owner.post(f"{S}{sub.pk}/limits/", {"tokens_per_minute": 50}, format="json").json()["tokens_per_minute"] == 50
    )
    assert owner.post(f"{S}{sub.pk}/limits/", {"tokens_per_minute": -1}, format="json").status_code == 400
    assert consumer.post(f"{S}{sub.pk}/limits/", {"tokens_per_minute": 10**6}, format="json").status_code == 403
    assert owner.post(f"{S}{sub.pk}/end/").json()["state"] == "ended"
    assert Subscription.objects.get(pk=sub.pk).tokens_per_minute == 50
    # a stranger to both sides sees nothing of it
    gamma_member = User.objects.create_user("gamma-member")
    assert client(gamma_member).post(f"{S}{sub.pk}/approve/").status_code == 404
    assert client(gamma_member).get(S).json()["results"] == []


@pytest.mark.parametrize("path", [f"{S}false/approve/", f"{S}%C3%A8/limits/", f"{P}1e3/unpublish/", f"{S}-1/"])
def test_an_id_that_is_not_a_number_is_a_404(world, path):
    response = world.client("platform_admin").post(path, {}, format="json")
    assert response.status_code == 404


def test_a_name_the_consumer_already_has_from_another_share_is_refused(world, chat, beta_admin):
    gamma = world.alpha.__class__.objects.create(slug="gamma", display_name="Gamma")
    other = running(world, world.alpha, "other", "other-name")
    ModelDeployment.objects.filter(pk=other.pk).update(tenant=gamma, served_model_name="", name="llama3-8b")
    publish(world, chat, to_all=True, auto_approve=True)
    services.publish(user=world.users["platform_admin"], deployment_id=other.pk, to_all=True, auto_approve=True)
    services.subscribe(user=beta_admin, consumer=world.beta, deployment_id=chat.pk)
    refused = client(beta_admin).post(S, {"tenant": "beta", "deployment": other.pk}, format="json")
    assert refused.status_code == 400
    assert refused.json()["deployment"] == ["Your tenant has a shared model named llama3-8b already."]
