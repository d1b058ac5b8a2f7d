"""Sign-ins in the audit log (portal.auditing): success and failure through every door, with the
client address the trusted-proxy rule gives and the user agent; and every other audited change
carries the same origin."""

from __future__ import annotations

import secrets

import pytest
from django.contrib import auth
from django.contrib.auth.models import AnonymousUser
from django.contrib.sessions.middleware import SessionMiddleware
from django.core.cache import cache
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from core.models import AuditEvent
from portal.oidc_callback import AuditedOIDCCallbackView
from tests.support.world import PASSWORD

AGENT = "Mozilla/5.0 (X11; Linux x86_64) audit-test"
RIGHT = {"username": "alpha-member", "password": PASSWORD}
WRONG = {"username": "alpha-member", "password": "wrong"}


@pytest.fixture(autouse=True)
def _fresh_lockouts():
    cache.clear()  # django-axes counts failures per address in the cache
    yield
    cache.clear()


def _sign_ins(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


class TestPasswordSignIn:
    def test_a_success_is_recorded_with_address_agent_and_method(self, world):
        response = Client(REMOTE_ADDR="192.0.2.10", HTTP_USER_AGENT=AGENT).post("/accounts/login/", RIGHT)
        assert response.status_code == 302
        [event] = _sign_ins("signin.success")
        assert (event.actor, event.actor_name, event.object_id) == (
            world.users["member"],
            "alpha-member",
            str(world.users["member"].pk),
        )
        assert (event.ip_address, event.user_agent, event.changes) == ("192.0.2.10", AGENT, {"method": "password"})

    def test_a_failure_names_the_account_tried_and_never_the_password(self, world):
        browser = Client(REMOTE_ADDR="192.0.2.11", HTTP_USER_AGENT=AGENT)
        assert browser.post("/accounts/login/", WRONG).status_code == 200
        assert browser.post("/accounts/login/", {"username": "nobody", "password": "x"}).status_code == 200
        known, unknown = _sign_ins("signin.failure")
        assert (known.actor, known.actor_name, known.object_type, known.object_id) == (
            None,
            "anonymous",
            "auth.user",
            str(world.users["member"].pk),
        )
        assert known.changes == {"method": "password", "username": "alpha-member", "locked_out": False}
        assert (known.ip_address, known.user_agent) == ("192.0.2.11", AGENT)
        assert (unknown.object_id, unknown.changes["username"]) == ("", "nobody")
        assert "wrong" not in str(list(AuditEvent.objects.values()))
        assert not _sign_ins("signin.success")

    def test_the_admin_login_is_a_door_too(self, world):
        Client(REMOTE_ADDR="192.0.2.12").post("/admin/login/", {**WRONG, "next": "/admin/"})
        [event] = _sign_ins("signin.failure")
        assert event.changes["method"] == "password" and event.ip_address == "192.0.2.12"

    def test_failures_stop_being_written_once_the_address_is_locked_out(self, world, settings):
        settings.AXES_FAILURE_LIMIT = 3
        browser = Client(REMOTE_ADDR="192.0.2.13")
        codes = [browser.post("/accounts/login/", WRONG).status_code for _ in range(6)]
        assert codes == [200, 200, 429, 429, 429, 429]
        assert [e.changes["locked_out"] for e in _sign_ins("signin.failure")] == [False, False, True]


class TestSourceAddress:
    def test_a_client_sent_x_forwarded_for_is_not_the_address(self, world):
        Client(REMOTE_ADDR="192.0.2.20", HTTP_X_FORWARDED_FOR="203.0.113.66").post("/accounts/login/", RIGHT)
        assert _sign_ins("signin.success")[0].ip_address == "192.0.2.20"

    def test_behind_a_trusted_proxy_its_entry_is_the_address(self, world, settings):
        settings.TRUSTED_PROXY_COUNT = 1
        forged = "203.0.113.66, 198.51.100.7"  # the client wrote the first entry, the proxy the last
        Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=forged).post("/accounts/login/", RIGHT)
        assert _sign_ins("signin.success")[0].ip_address == "198.51.100.7"

    def test_an_entry_that_is_no_address_and_a_hostile_agent_are_stored_safely(self, world, settings):
        settings.TRUSTED_PROXY_COUNT = 1
        client = Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="unknown", HTTP_USER_AGENT="a\x00b" + "c" * 600)
        assert client.post("/accounts/login/", RIGHT).status_code == 302
        event = _sign_ins("signin.success")[0]
        assert event.ip_address is None and event.user_agent == "ab" + "c" * 510

    def test_every_audited_change_carries_the_origin(self, world):
        api = APIClient(REMOTE_ADDR="192.0.2.30", HTTP_USER_AGENT=AGENT)
        api.force_authenticate(world.users["member"])
        assert api.post("/api/v1/tokens/", {"name": "ci"}).status_code == 201
        event = AuditEvent.objects.get(action="token.create")
        assert (event.ip_address, event.user_agent) == ("192.0.2.30", AGENT)


class TestTokensAndOpenId:
    def test_a_bad_api_token_is_a_failed_sign_in(self, world):
        api = APIClient(REMOTE_ADDR="192.0.2.40")
        api.credentials(HTTP_AUTHORIZATION=f"Token llmp_{secrets.token_hex(32)}")
        assert api.get("/api/v1/me/").status_code == 401
        [event] = _sign_ins("signin.failure")
        assert event.changes == {"method": "token", "username": "", "locked_out": False}
        assert event.ip_address == "192.0.2.40"

    def _request(self, path="/oidc/callback/"):
        request = RequestFactory(REMOTE_ADDR="192.0.2.50", HTTP_USER_AGENT=AGENT).get(path)
        SessionMiddleware(lambda r: None).process_request(request)
        request.user = AnonymousUser()
        return request

    def test_an_openid_sign_in_is_recorded_as_oidc(self, world):
        # mozilla-django-oidc's callback logs the person in through django.contrib.auth with its backend.
        auth.login(self._request(), world.users["member"], backend="portal.oidc.PortalOIDCBackend")
        [event] = _sign_ins("signin.success")
        assert event.changes == {"method": "oidc"} and event.ip_address == "192.0.2.50"

    def test_an_openid_exchange_that_authenticates_no_one_is_a_failure(self, world):
        # The callback's own call when the code exchange or the claims fail: no backend says yes.
        assert auth.authenticate(request=self._request(), nonce="n", code_verifier=None) is None
        [event] = _sign_ins("signin.failure")
        assert event.changes["method"] == "oidc" and event.ip_address == "192.0.2.50"

    def test_the_providers_refusal_is_recorded_once_per_sign_in_started_here(self, world, settings):
        settings.LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/"
        request = self._request("/oidc/callback/?error=access_denied&state=s1")
        request.session["oidc_states"] = {"s1": {"nonce": "n", "code_verifier": None}}
        assert AuditedOIDCCallbackView.as_view()(request).status_code == 302
        [event] = _sign_ins("signin.failure")
        assert event.changes["method"] == "oidc" and "access_denied" in event.reason
        # The same answer again (the state is spent), or one this browser never asked for: nothing.
        assert AuditedOIDCCallbackView.as_view()(request).status_code == 302
        stranger = self._request("/oidc/callback/?error=access_denied&state=forged")
        assert AuditedOIDCCallbackView.as_view()(stranger).status_code == 302
        assert len(_sign_ins("signin.failure")) == 1


class TestRealProvider:
    """The whole code flow against the real `oidc-provider` (tests/support/oidc.py)."""

    @pytest.fixture
    def provider(self, tmp_path, settings):
        from tests.support.oidc import point_the_portal_at, start_provider, stop_provider

        provider, process = start_provider(tmp_path, ["http://testserver/oidc/callback/"])
        point_the_portal_at(provider, settings)
        yield provider
        stop_provider(process)

    def test_a_sign_in_and_a_refused_one_are_recorded_as_oidc(self, world, provider):
        from tests.support.oidc import sign_in_over_http

        provider.set_account("erin", email="erin@example.org", email_verified=True, preferred_username="erin")
        provider.set_account("mallory", email="dana@example.org", email_verified="false")  # a string: refused
        sign_in_over_http(Client(REMOTE_ADDR="192.0.2.60", HTTP_USER_AGENT=AGENT), provider, "erin")
        sign_in_over_http(Client(REMOTE_ADDR="192.0.2.61"), provider, "mallory")
        [success] = _sign_ins("signin.success")
        assert (success.actor_name, success.changes, success.ip_address, success.user_agent) == (
            "erin",
            {"method": "oidc"},
            "192.0.2.60",
            AGENT,
        )
        [failure] = _sign_ins("signin.failure")
        assert failure.changes["method"] == "oidc" and failure.ip_address == "192.0.2.61"
