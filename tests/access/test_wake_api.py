"""POST /api/v1/gateway/wake/<deployment> (issue 35): the activator's call, authenticated only by
the client's API key (Authorization: Bearer). 401 for no key, an unknown or revoked one, and for
portal credentials alone; 404, with one body, for a deployment the key may not use or that does
not exist; 202 woken or starting, 200 serving, 409 refused with Retry-After."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from access.models import ApiKey
from access.services import key_mint, key_revoke
from deployments import services
from deployments.choices import State
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.policy_actions import IDLE_STOPPED, deployment_policy_stop
from deployments.wake import WOKEN
from portal.api import token_create
from quotas.models import Membership, TenantQuota
from runtime.gateway_local.routes import WAKE_PATH
from sharing import services as sharing
from tests.reclaim.support import serving
from tests.support.factories import draft


def url(deployment_id: int) -> str:
    return f"/api/v1/gateway/wake/{deployment_id}"


def post(deployment_id: int, key: str | None, client: APIClient | None = None):
    client = client or APIClient()
    if key is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client.post(url(deployment_id))


def mint(world, tenant, deployment=None) -> str:
    role = "tenant_admin" if tenant == world.alpha else "platform_admin"
    return key_mint(user=world.users[role], tenant=tenant, name="k", deployment_id=deployment and deployment.pk)[1]


def idle_stopped(world, tenant=None, name: str = "chat") -> ModelDeployment:
    tenant = tenant or world.alpha
    if tenant == world.alpha:
        dep = serving(world, name=name, since=timezone.now() - timedelta(hours=3))
    else:
        dep = services.deployment_create(tenant=tenant, user=world.users["other_member"], data=draft(world, name=name))
        services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    deployment_policy_stop(deployment_id=dep.pk, reason="idle", cause=IDLE_STOPPED)
    return ModelDeployment.objects.get(pk=dep.pk)


def state(dep) -> str:
    return ModelDeployment.objects.get(pk=dep.pk).state


NOT_FOUND = {
    "error": {
        "message": "No such deployment, or this key may not use it.",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
}


def test_the_route_is_the_one_the_local_gateway_calls():
    assert reverse("gateway-wake", args=[7]) == WAKE_PATH + "7"


class TestWhoMayWake:
    @pytest.mark.parametrize("case", ["none", "unknown", "revoked", "basic", "huge"])
    def test_no_key_an_unknown_or_revoked_one_is_401_and_nothing_wakes(self, world, case):
        dep = idle_stopped(world)
        if case == "revoked":
            key = mint(world, world.alpha)
            key_revoke(user=world.users["tenant_admin"], key_id=ApiKey.objects.latest("id").pk)
        else:
            key = {"none": None, "unknown": "sk-portal-" + "x" * 43, "basic": None, "huge": "k" * 5000}[case]
        client = APIClient()
        if case == "basic":
            client.credentials(HTTP_AUTHORIZATION="Basic YWxwaGE6cGFzcw==")
        response = post(dep.pk, key, client)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"
        assert state(dep) == State.STOPPED

    @pytest.mark.parametrize("role", ["member", "tenant_admin", "platform_admin"])
    def test_a_portal_session_or_token_alone_is_401(self, world, role):
        dep = idle_stopped(world)
        assert world.client(role).post(url(dep.pk)).status_code == 401  # DRF's forced authentication
        assert world.browser(role).post(url(dep.pk)).status_code == 401  # a signed-in browser session
        token = APIClient()
        token.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(user=world.users[role], name='ops')[1]}")
        response = token.post(url(dep.pk))
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
        assert state(dep) == State.STOPPED

    def test_a_key_that_may_not_use_it_and_a_missing_deployment_get_the_same_404(self, world):
        dep = idle_stopped(world)
        other = idle_stopped(world, name="other")
        foreign = post(dep.pk, mint(world, world.beta))
        scoped = post(dep.pk, mint(world, world.alpha, other))
        missing = post(10**9, mint(world, world.alpha))
        for response in (foreign, scoped, missing):
            assert response.status_code == 404 and response.json() == NOT_FOUND
        assert foreign.content == missing.content
        assert state(dep) == State.STOPPED
        assert not DeploymentEvent.objects.filter(reason=WOKEN).exists()

    def test_a_key_minted_for_the_deployment_wakes_it(self, world):
        dep = idle_stopped(world)
        response = post(dep.pk, mint(world, world.alpha, dep))
        assert response.status_code == 202 and response.json()["outcome"] == "woken"


class TestOutcomes:
    def test_woken_is_202_with_the_tenants_timeout(self, world):
        world.alpha.wake_timeout_seconds = 300
        world.alpha.save(update_fields=["wake_timeout_seconds"])
        dep = idle_stopped(world)
        key = mint(world, world.alpha)

        response = post(dep.pk, key)
        assert response.status_code == 202
        assert response.json() == {"outcome": "woken", "state": "approved", "timeout_seconds": 300}
        assert "Retry-After" not in response
        dep = ModelDeployment.objects.get(pk=dep.pk)
        assert dep.state == State.APPROVED and dep.reserved_gpus == 2
        event = DeploymentEvent.objects.get(deployment=dep, reason=WOKEN)
        assert f"(id {ApiKey.objects.get().pk})" in event.message

        again = post(dep.pk, key)  # it starts: the activator keeps waiting
        assert again.status_code == 202
        assert again.json() == {"outcome": "starting", "state": "approved", "timeout_seconds": 300}
        assert DeploymentEvent.objects.filter(deployment=dep, reason=WOKEN).count() == 1

    def test_serving_is_200(self, world):
        dep = serving(world, since=timezone.now() - timedelta(hours=1))
        response = post(dep.pk, mint(world, world.alpha))
        assert response.status_code == 200
        assert response.json() == {"outcome": "serving", "state": "ready", "timeout_seconds": 120}

    def test_a_refusal_is_409_with_retry_after_in_the_header_and_the_body(self, world):
        dep = serving(world, since=timezone.now() - timedelta(hours=1))
        services.deployment_stop(deployment_id=dep.pk, user=world.users["member"])
        world.alpha.wake_timeout_seconds = 0
        world.alpha.save(update_fields=["wake_timeout_seconds"])

        response = post(dep.pk, mint(world, world.alpha))
        assert response.status_code == 409
        body = response.json()
        assert set(body) == {"outcome", "code", "message", "retry_after", "state", "timeout_seconds"}
        assert (body["outcome"], body["code"], body["state"]) == ("refused", "not_wakeable", "stopped")
        assert body["timeout_seconds"] == 0 and "a person stopped it" in body["message"]
        assert body["retry_after"] > 0 and response["Retry-After"] == str(body["retry_after"])
        assert state(dep) == State.STOPPED

    def test_a_closed_schedule_says_how_long_until_it_opens(self, world):
        dep = idle_stopped(world)
        # Open only the day after tomorrow (UTC, the portal's time zone): closed now, even across a midnight.
        key, before = mint(world, world.alpha), timezone.now()
        opens = before.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=2)
        world.alpha.serving_schedule = f"{opens.strftime('%a').lower()} 00:00-24:00"
        world.alpha.save(update_fields=["serving_schedule"])

        response = post(dep.pk, key)
        assert response.status_code == 409
        body = response.json()
        assert body["code"] == "schedule_closed"
        assert 0 <= (opens - before).total_seconds() - body["retry_after"] <= 5
        assert response["Retry-After"] == str(body["retry_after"])
        assert state(dep) == State.STOPPED

    def test_full_quota_is_409_quota_exceeded(self, world):
        dep = idle_stopped(world)
        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(reserved_gpus=12)
        response = post(dep.pk, mint(world, world.alpha))
        assert response.status_code == 409 and response.json()["code"] == "quota_exceeded"
        assert response["Retry-After"] == str(response.json()["retry_after"])
        assert state(dep) == State.STOPPED


class TestSharedDeployment:
    @pytest.fixture
    def shared(self, world) -> ModelDeployment:
        """alpha's idle-stopped deployment, published to beta, beta subscribed (auto-approved)."""
        dep = idle_stopped(world)
        sharing.publish(user=world.users["tenant_admin"], deployment_id=dep.pk, tenants=["beta"], auto_approve=True)
        beta_admin = world.users["other_member"]
        Membership.objects.filter(user=beta_admin, tenant=world.beta).update(role="tenant_admin")
        sharing.subscribe(user=beta_admin, consumer=world.beta, deployment_id=dep.pk)
        return dep

    def test_the_consumers_tenant_wide_key_wakes_it(self, world, shared):
        world.beta.wake_timeout_seconds = 30  # the owner's setting counts, not the consumer's
        world.beta.save(update_fields=["wake_timeout_seconds"])
        response = post(shared.pk, mint(world, world.beta))
        assert response.status_code == 202
        assert response.json() == {"outcome": "woken", "state": "approved", "timeout_seconds": 120}
        assert state(shared) == State.APPROVED

    def test_the_consumers_key_scoped_to_its_own_deployment_may_not(self, world, shared):
        own = idle_stopped(world, tenant=world.beta, name="beta-own")
        response = post(shared.pk, mint(world, world.beta, own))
        assert response.status_code == 404 and response.json() == NOT_FOUND
        assert state(shared) == State.STOPPED

    def test_an_ended_subscription_does_not_wake_it(self, world, shared):
        sharing.unpublish(user=world.users["tenant_admin"], deployment_id=shared.pk)
        response = post(shared.pk, mint(world, world.beta))
        assert response.status_code == 404 and state(shared) == State.STOPPED
