"""Issue 32, "Confirmation and wording" on the deployment pages: stop asks first on its own page
(no script needed) while the API stops in one call; a deployment that does not run says so in
its Endpoint panel, why, and how it runs again, and shows the last run's conditions as history;
Kubernetes-only parts are left out for the local backend; the snippets include streaming."""

from __future__ import annotations

import re
from html import unescape

import pytest

from deployments import services
from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.policy_actions import deployment_policy_stop
from deployments.states import RUNNING, Actor
from tests.support.factories import draft

URL = "http://llama-chat.alpha.svc:8000/v1"


def running(world, **overrides) -> ModelDeployment:
    """Revision 1 approved and observed Ready, with the local engine's kind of status message."""
    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, **overrides))
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    dep.refresh_from_db()
    services.deployment_observe(
        deployment_id=dep.pk,
        generation=dep.generation,
        state=State.READY,
        conditions=[{"type": "Ready", "status": "True", "reason": "ServeRunning", "message": "All replicas up."}],
        observed_generation=dep.generation,
        endpoint_url=URL,
        message=f"Serving on {URL}.",
    )
    dep.refresh_from_db()
    return dep


@pytest.fixture
def serving(world):
    return running(world)


def html(world, role: str, dep) -> str:
    return world.browser(role).get(f"/deployments/{dep.pk}/").content.decode()


def element(page: str, element_id: str, tag: str = "div") -> str:
    found = re.search(rf'<{tag}[^>]*id="{element_id}".*?</{tag}>', page, re.S)
    return found.group(0) if found else ""


def text(fragment: str) -> str:
    """The words of an HTML fragment, as a person reads them."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


class TestStopAsksFirst:
    def test_the_button_leads_to_a_confirmation_that_changes_nothing(self, world, serving):
        client = world.browser("member")
        detail = client.get(f"/deployments/{serving.pk}/").content.decode()
        assert f'<form method="get" action="/deployments/{serving.pk}/stop/">' in detail
        page = client.get(f"/deployments/{serving.pk}/stop/").content.decode()
        assert "Stop llama-chat?" in page and "Yes, stop it" in page and "Keep it running" in page
        assert "Its 2 reserved GPUs are released now" in page and "Revision 1 stays the serving revision" in page
        assert f'<form method="post" action="/deployments/{serving.pk}/stop/"' in page
        serving.refresh_from_db()
        assert (serving.state, serving.reserved_gpus) == (State.READY, 2)

    def test_confirming_stops_it(self, world, serving):
        response = world.browser("member").post(f"/deployments/{serving.pk}/stop/", follow=True)
        assert "Stopping." in response.content.decode()
        serving.refresh_from_db()
        assert (serving.state, serving.reserved_gpus) == (State.STOPPED, 0)

    def test_a_viewer_may_not_and_another_tenant_sees_nothing(self, world, serving):
        assert world.browser("viewer").get(f"/deployments/{serving.pk}/stop/").status_code == 403
        assert world.browser("other_member").get(f"/deployments/{serving.pk}/stop/").status_code == 404
        assert "/stop/" not in html(world, "viewer", serving)
        serving.refresh_from_db()
        assert serving.state == State.READY

    def test_a_stopped_deployment_offers_no_stop(self, world, serving):
        services.deployment_stop(deployment_id=serving.pk, user=world.users["member"])
        response = world.browser("member").get(f"/deployments/{serving.pk}/stop/", follow=True)
        assert "Cannot stop a deployment that is stopped." in response.content.decode()

    def test_the_api_stops_in_one_call(self, world, serving):
        response = world.client("member").post(f"/api/v1/deployments/{serving.pk}/stop/")
        assert response.status_code == 200 and response.json()["state"] == State.STOPPED


class TestDeleteAsksFirst:
    """Delete asks on a page of its own too (before, only a script's dialog asked: without
    JavaScript one click deleted)."""

    def test_the_button_leads_to_a_confirmation_that_changes_nothing(self, world, serving):
        client = world.browser("member")
        detail = client.get(f"/deployments/{serving.pk}/").content.decode()
        assert f'<form method="get" action="/deployments/{serving.pk}/delete/">' in detail
        assert "data-confirm" not in detail
        page = client.get(f"/deployments/{serving.pk}/delete/").content.decode()
        assert "Delete llama-chat?" in page and "Yes, delete it" in page and "Keep it" in page
        assert "Its endpoint stops answering and its 2 reserved GPUs are released." in page
        assert f'<form method="post" action="/deployments/{serving.pk}/delete/"' in page
        serving.refresh_from_db()
        assert (serving.state, serving.reserved_gpus) == (State.READY, 2)

    def test_confirming_deletes_it(self, world, serving):
        response = world.browser("member").post(f"/deployments/{serving.pk}/delete/", follow=True)
        assert "Deleting." in response.content.decode()
        serving.refresh_from_db()
        assert serving.state == State.DELETING

    def test_a_stopped_deployment_is_not_said_to_stop_serving(self, world, serving):
        services.deployment_stop(deployment_id=serving.pk, user=world.users["member"])
        page = world.browser("member").get(f"/deployments/{serving.pk}/delete/").content.decode()
        assert "llama-chat is deleted for good" in page and "stops answering" not in page

    def test_a_viewer_may_not_and_another_tenant_sees_nothing(self, world, serving):
        assert world.browser("viewer").get(f"/deployments/{serving.pk}/delete/").status_code == 403
        assert world.browser("other_member").get(f"/deployments/{serving.pk}/delete/").status_code == 404
        refused = world.browser("viewer").post(f"/deployments/{serving.pk}/delete/", follow=True)
        assert "Only members of the tenant may delete a deployment." in refused.content.decode()
        assert "/delete/" not in html(world, "viewer", serving)
        serving.refresh_from_db()
        assert serving.state == State.READY


class TestNotServing:
    def test_a_stopped_deployment_says_so_who_stopped_it_and_how_to_start_it(self, world, serving):
        services.deployment_stop(deployment_id=serving.pk, user=world.users["member"])
        page = html(world, "member", serving)
        panel = text(element(page, "endpoint-panel", "section"))
        assert "Not serving: stopped by alpha-member" in panel
        assert "Start it again with Start at the top of the page: revision 1 runs again" in panel
        assert 'id="endpoint-url"' not in page and "Try it" not in panel
        assert "How to call it once it runs." in panel  # the snippets still apply once it runs again
        viewer = text(element(html(world, "viewer", serving), "serve-again", "p"))
        assert (
            viewer
            == "Members, tenant admins and platform admins can start it again (revision 1, without a new approval)."
        )

    def test_the_last_run_is_history_not_current_status(self, world, serving):
        services.deployment_stop(deployment_id=serving.pk, user=world.users["member"])
        page = html(world, "member", serving)
        assert 'id="status-message"' not in page
        history = text(element(page, "status-history", "p"))
        assert history.startswith("Not running (stopped): the conditions below are what the runtime last reported")
        assert f"Last message: Serving on {URL}." in history
        assert '<table class="conditions history"><caption class="small">Last run</caption>' in page

    def test_a_running_deployment_shows_its_message_and_conditions_as_current(self, world, serving):
        page = html(world, "member", serving)
        assert f'<p id="status-message">Serving on {URL}.</p>' in page
        assert 'id="status-history"' not in page and '<table class="conditions">' in page
        assert f'<code id="endpoint-url">{URL}</code>' in page and 'id="not-serving"' not in page

    def test_a_policy_stop_names_the_policy_and_its_reason(self, world, serving):
        deployment_policy_stop(deployment_id=serving.pk, reason="No tokens for 8 hours.", cause="IdleStopped")
        panel = text(element(html(world, "member", serving), "endpoint-panel", "section"))
        assert "Not serving: stopped by the tenant's policy" in panel and "No tokens for 8 hours." in panel

    def test_a_failure_says_why(self, world, serving):
        services.deployment_observe(
            deployment_id=serving.pk,
            generation=serving.generation,
            state=State.FAILED,
            conditions=[{"type": "Ready", "status": "False", "reason": "DeployFailed"}],
            message="The engine ran out of GPU memory.",
        )
        panel = text(element(html(world, "member", serving), "endpoint-panel", "section"))
        assert "Not serving: failed" in panel and "The engine ran out of GPU memory." in panel
        assert "Start it again with Start" in panel

    def test_a_rejected_request_gives_the_reason_and_no_snippets(self, world):
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        services.deployment_reject(
            deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1, reason="Use the 8B model."
        )
        panel = text(element(html(world, "member", dep), "endpoint-panel", "section"))
        assert "Not serving: rejected by platform-admin" in panel and "Use the 8B model." in panel
        assert "A rejected request is final" in panel and "curl" not in panel and "start it again" not in panel

    def test_a_request_waits_for_approval(self, world):
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        panel = text(element(html(world, "member", dep), "endpoint-panel", "section"))
        assert "Not serving: pending approval. Nothing runs until a platform admin approves the request." in panel
        assert "curl" in panel  # how it will be called

    def test_every_state_that_does_not_run_has_words(self, world):
        from deployments.endpoint import NOT_SERVING, serving_notice

        assert set(NOT_SERVING) == set(State.values) - RUNNING
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        for state in State.values:
            dep.state = state
            notice = serving_notice(dep, Actor.MEMBER)
            assert (notice is None) == (state in RUNNING), state


class TestLocalBackend:
    def test_no_kubernetes_controls_for_a_local_deployment(self, world, serving):
        ModelDeployment.objects.filter(pk=serving.pk).update(backend="local")
        page = html(world, "member", serving)
        assert "Fetch cluster events" not in page and "Kueue:" not in page and "Kubernetes Events of" not in page
        timeline = world.browser("member").get(f"/deployments/{serving.pk}/timeline/").content.decode()
        assert "Cluster events" not in timeline

    def test_a_cluster_deployment_keeps_them(self, world, serving):
        page = html(world, "member", serving)
        assert "Fetch cluster events" in page and "<strong>Kueue:</strong>" in page
        timeline = world.browser("member").get(f"/deployments/{serving.pk}/timeline/").content.decode()
        assert "Cluster events not read yet." in timeline


class TestStreamingSnippets:
    def test_curl_and_python_stream_beside_the_plain_ones(self, world, serving):
        from deployments.endpoint import snippets

        found = snippets(serving)
        assert found["curl_stream"].startswith(f"curl -N {URL}/chat/completions")
        assert '"stream": true' in found["curl_stream"] and '"stream"' not in found["curl"]
        assert "stream=True" in found["python_stream"] and "delta.content" in found["python_stream"]
        page = html(world, "viewer", serving)
        for block in ("snippet-curl", "snippet-curl-stream", "snippet-python", "snippet-python-stream"):
            assert f'id="{block}"' in page and f'data-copy="{block}"' in page
        assert "curl, streaming" in page and "OpenAI client, streaming (Python)" in page

    def test_the_streaming_examples_ask_for_usage_so_a_token_limit_counts_them(self, world, serving):
        """Kuadrant's TokenRateLimitPolicy counts a stream only from the usage event that
        `stream_options.include_usage` asks for (runtime.manifests.gateway); the plain calls
        report usage anyway and send nothing extra."""
        import json

        from deployments.endpoint import snippets

        found = snippets(serving)
        body = json.loads(found["curl_stream"].split("-d '", 1)[1].rstrip("'"))
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert 'stream_options={"include_usage": True}' in found["python_stream"]
        # The usage chunk has no choices: the loop must not index into it.
        assert "if chunk.choices and" in found["python_stream"]
        assert "stream_options" not in found["curl"] and "stream_options" not in found["python"]
        page = unescape(element(html(world, "viewer", serving), "snippet-curl-stream", "pre"))
        assert '"stream_options": {"include_usage": true}' in page


class TestLimitsInTheNote:
    """Behind the Gateway the note says the tenant's limits as a key holder meets them."""

    @pytest.fixture
    def exposed(self, world, serving, settings):
        settings.GATEWAY_PUBLIC_URL = "https://llm.example.com"
        ModelDeployment.objects.filter(pk=serving.pk).update(backend="kuberay")
        serving.refresh_from_db()
        return serving

    def test_per_key_limits_and_the_streaming_rule(self, world, exposed):
        from deployments.endpoint import endpoint_note

        world.alpha.tokens_per_minute, world.alpha.requests_per_minute = 50_000, 600
        world.alpha.save(update_fields=["tokens_per_minute", "requests_per_minute"])
        exposed.refresh_from_db()
        note = endpoint_note(exposed)
        assert "Each key may use 50,000 tokens a minute" in note and "600 requests a minute" in note
        assert "on this endpoint" in note and '"include_usage": true' in note and "429" in note

    def test_only_the_limits_the_tenant_sets(self, world, exposed):
        from deployments.endpoint import endpoint_note

        assert "Each key may use" not in endpoint_note(exposed)
        world.alpha.requests_per_minute = 60
        world.alpha.save(update_fields=["requests_per_minute"])
        exposed.refresh_from_db()
        note = endpoint_note(exposed)
        assert "Each key may use 60 requests a minute on this endpoint" in note and "tokens" not in note
