"""Revisions in the browser (issue 30): the serving revision and the proposed change on the detail
page, withdraw and cancel after a confirmation page, an admin's decision bound to the revision it
names (a stale one is a form error and changes nothing), the history with roll back, the diff
between any two revisions, what an edit became, and the approvals page and inbox."""

from __future__ import annotations

import re

import pytest

from deployments import services
from deployments.choices import RevisionStatus, State
from deployments.models import SPEC_FIELDS, DeploymentRevision, ModelDeployment
from tests.support.factories import draft

P = RevisionStatus


def running(world, name="llama-chat", **overrides) -> ModelDeployment:
    """Revision 1 approved by the platform admin and observed Ready (2 H100s reserved)."""
    dep = services.deployment_create(
        tenant=world.alpha, user=world.users["member"], data=draft(world, name=name, **overrides)
    )
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    dep.refresh_from_db()
    services.deployment_observe(
        deployment_id=dep.pk,
        generation=dep.generation,
        state=State.READY,
        conditions=[{"type": "Ready", "status": "True", "reason": "ServeRunning"}],
        observed_generation=dep.generation,
        endpoint_url="http://llama-chat.alpha.svc:8000/v1",
    )
    dep.refresh_from_db()
    return dep


def propose(world, dep, role="member", **fields) -> ModelDeployment:
    services.deployment_update(deployment_id=dep.pk, user=world.users[role], data=fields)
    dep.refresh_from_db()
    return dep


@pytest.fixture
def serving(world):
    return running(world)


@pytest.fixture
def changed(world, serving):
    """Revision 2 waits: max model length 8192 → 4096 and 3 replicas (2 → 3 GPUs)."""
    return propose(world, serving, max_model_len=4096, max_replicas=3)


def page(world, role, url, **kwargs):
    return world.browser(role).get(url, **kwargs).content.decode()


def section(html: str, element_id: str) -> str:
    """The element with `element_id` up to its closing </section> or </article> (enough for these pages)."""
    found = re.search(rf'id="{element_id}".*?</(section|article)>', html, re.S)
    return found.group(0) if found else ""


def unchanged(dep, *, serving=1, proposed=2, state=State.READY, gpus=2) -> None:
    dep.refresh_from_db()
    assert (dep.serving_revision.number, dep.proposed_number, dep.state, dep.reserved_gpus) == (
        serving,
        proposed,
        state,
        gpus,
    )


class TestDetailPage:
    def test_the_serving_revision_says_who_approved_it_and_when(self, world, serving):
        html = page(world, "viewer", f"/deployments/{serving.pk}/")
        line = re.search(r'id="serving-revision">(.*?)</p>', html, re.S).group(1)
        assert "Serving revision <strong>1</strong>, approved by platform-admin" in line
        assert serving.serving_revision.decided_at.strftime("%Y-%m-%d %H:%M") in line
        assert f'href="/deployments/{serving.pk}/revisions/"' in line and "History (1 revision)" in line
        assert 'id="proposed-change"' not in html

    def test_a_waiting_change_shows_its_diff_gpus_cost_and_how_it_applies(self, world, changed):
        panel = section(page(world, "member", f"/deployments/{changed.pk}/"), "proposed-change")
        assert "Proposed change: revision 2" in panel
        assert re.search(r"<th scope=\"row\">Max model length</th><td><del>8192</del></td><td>.*?4096", panel)
        assert re.search(r"<th scope=\"row\">Maximum replicas</th><td><del>2</del></td><td>.*?3", panel)
        assert "Minimum replicas" not in panel  # only what changes
        assert "2 → 3 (+1)" in panel and "$7.80/h → $11.70/h (+$3.90/h)" in panel
        assert "Revision 1 keeps running meanwhile, untouched" in panel
        assert "Proposed by alpha-member" in panel and "Changed Max model length, Maximum replicas." in panel

    def test_a_recreate_says_so_and_how_many_gpus_the_swap_needs(self, world, serving):
        dep = propose(world, serving, tensor_parallel_size=2)
        panel = section(page(world, "member", f"/deployments/{dep.pk}/"), "proposed-change")
        assert 'data-how="recreate"' in panel and "Recreates the workload." in panel
        assert "The Ray cluster settings change: the RayService is deleted and created again" in panel
        assert "The cluster needs 4 GPUs for the swap." in panel

    def test_a_rolling_update_says_so_and_how_many_gpus_the_swap_needs(self, world):
        dep = propose(world, running(world, backend="kserve"), model_source="mistralai/Mistral-7B-Instruct-v0.3")
        panel = section(page(world, "member", f"/deployments/{dep.pk}/"), "proposed-change")
        assert 'data-how="rolling"' in panel and "Rolling update." in panel
        assert "new pods start beside the old ones" in panel
        assert "The cluster needs up to 3 GPUs during the swap (now 2)." in panel

    def test_a_viewer_sees_the_change_and_no_button_on_it(self, world, changed):
        html = page(world, "viewer", f"/deployments/{changed.pk}/")
        panel = section(html, "proposed-change")
        assert "Proposed change: revision 2" in panel
        for text in ("Withdraw change", "Approve revision", "Reject revision"):
            assert text not in html
        assert f'action="/deployments/{changed.pk}/stop/"' not in html

    def test_a_member_may_withdraw_but_not_decide(self, world, changed):
        panel = section(page(world, "member", f"/deployments/{changed.pk}/"), "proposed-change")
        assert f'<form method="get" action="/deployments/{changed.pk}/withdraw/">' in panel
        assert '<input type="hidden" name="revision" value="2"><button class="btn secondary" type="submit">' in panel
        assert "Withdraw change" in panel and "Approve revision" not in panel

    def test_an_admin_decides_on_the_revision_shown(self, world, changed):
        panel = section(page(world, "platform_admin", f"/deployments/{changed.pk}/"), "proposed-change")
        for action in ("approve", "reject"):
            form = re.search(rf'action="/deployments/{changed.pk}/{action}/".*?</form>', panel, re.S).group(0)
            assert '<input type="hidden" name="revision" value="2">' in form
        assert "Approve revision 2" in panel and "Reject revision 2" in panel

    def test_stop_and_scale_stay_while_a_change_waits(self, world, changed):
        html = page(world, "member", f"/deployments/{changed.pk}/")
        assert f'action="/deployments/{changed.pk}/stop/"' in html
        assert f'action="/deployments/{changed.pk}/scale/"' in html
        assert f'action="/deployments/{changed.pk}/cancel/"' not in html  # approved once: no cancel

    def test_a_first_request_waits_without_claiming_anything_serves(self, world):
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        html = page(world, "member", f"/deployments/{dep.pk}/")
        panel = section(html, "proposed-change")
        assert "Request waiting for approval: revision 1" in panel and "Nothing runs until" in panel
        assert "keeps serving" not in html and "keeps running" not in html
        assert "Nothing approved yet" in html
        assert f'<form method="get" action="/deployments/{dep.pk}/cancel/">' in html and "Cancel request" in html
        assert "Withdraw change" not in html


class TestWithdraw:
    def test_the_button_leads_to_a_confirmation_that_changes_nothing(self, world, changed):
        response = world.browser("member").get(f"/deployments/{changed.pk}/withdraw/", {"revision": 2})
        html = response.content.decode()
        assert response.status_code == 200 and "Withdraw revision 2 of llama-chat?" in html
        assert "revision 1 keeps running as it is" in html and "Max model length" in html
        form = re.search(
            r'<form method="post" action="([^"]+)" class="actions mt" id="confirm-form">(.*?)</form>', html, re.S
        )
        assert form.group(1) == f"/deployments/{changed.pk}/withdraw/"
        assert '<input type="hidden" name="revision" value="2">' in form.group(2)
        assert "Yes, withdraw revision 2" in form.group(2) and "Keep the change" in form.group(2)
        unchanged(changed)

    def test_confirming_withdraws_and_the_serving_revision_runs_on(self, world, changed):
        client = world.browser("member")
        response = client.post(f"/deployments/{changed.pk}/withdraw/", {"revision": 2}, follow=True)
        html = response.content.decode()
        assert response.redirect_chain == [(f"/deployments/{changed.pk}/", 302)]
        assert "Withdrew revision 2; revision 1 keeps running, untouched." in html
        assert 'id="proposed-change"' not in html
        unchanged(changed, proposed=None)
        assert changed.revisions.get(number=2).status == P.WITHDRAWN
        assert changed.max_model_len == 8192

    def test_a_viewer_may_not_and_another_tenant_sees_nothing(self, world, changed):
        assert world.browser("viewer").get(f"/deployments/{changed.pk}/withdraw/").status_code == 403
        response = world.browser("viewer").post(f"/deployments/{changed.pk}/withdraw/", {"revision": 2}, follow=True)
        assert "Only members of the tenant may withdraw a deployment." in response.content.decode()
        assert world.browser("other_member").get(f"/deployments/{changed.pk}/withdraw/").status_code == 404
        unchanged(changed)

    @pytest.mark.parametrize("value", ["1", "3", "abc", "99999999999999999999", "\x00", "-2"])
    def test_a_link_to_anything_but_the_waiting_revision_goes_back_with_a_message(self, world, changed, value):
        response = world.browser("member").get(f"/deployments/{changed.pk}/withdraw/", {"revision": value})
        assert response.status_code == 302 and response["Location"] == f"/deployments/{changed.pk}/"
        unchanged(changed)

    def test_a_stale_confirmation_withdraws_nothing(self, world, changed):
        propose(world, changed, max_model_len=2048)  # revision 3 replaces revision 2
        response = world.browser("member").post(f"/deployments/{changed.pk}/withdraw/", {"revision": 2}, follow=True)
        assert "Revision 2 is superseded" in response.content.decode()
        unchanged(changed, proposed=3)

    def test_nothing_waiting_means_no_confirmation(self, world, serving):
        response = world.browser("member").get(f"/deployments/{serving.pk}/withdraw/", follow=True)
        assert "Nothing is waiting for approval." in response.content.decode()


class TestCancel:
    def test_a_request_is_cancelled_after_a_confirmation(self, world):
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        client = world.browser("member")
        html = client.get(f"/deployments/{dep.pk}/cancel/").content.decode()
        assert "Cancel the request for llama-chat?" in html and "Yes, cancel the request" in html
        assert f'<form method="post" action="/deployments/{dep.pk}/cancel/"' in html
        dep.refresh_from_db()
        assert dep.state == State.PENDING_APPROVAL
        response = client.post(f"/deployments/{dep.pk}/cancel/", follow=True)
        assert "Cancelled the request" in response.content.decode()
        dep.refresh_from_db()
        assert dep.state == State.CANCELLED

    def test_an_approved_deployment_offers_no_cancel(self, world, serving):
        response = world.browser("member").get(f"/deployments/{serving.pk}/cancel/", follow=True)
        assert "Cannot cancel a deployment that is ready." in response.content.decode()
        assert world.browser("viewer").get(f"/deployments/{serving.pk}/cancel/").status_code == 403
        serving.refresh_from_db()
        assert serving.state == State.READY


class TestDecisionsOnTheDetailPage:
    def test_approving_the_revision_shown_makes_it_serve(self, world, changed):
        response = world.browser("platform_admin").post(f"/deployments/{changed.pk}/approve/", {"revision": 2})
        assert response.status_code == 302
        changed.refresh_from_db()
        assert (changed.serving_revision.number, changed.max_model_len, changed.reserved_gpus) == (2, 4096, 3)

    def test_a_stale_revision_is_a_form_error_and_nothing_changes(self, world, changed):
        propose(world, changed, max_model_len=2048)  # revision 3 replaces revision 2
        response = world.browser("platform_admin").post(f"/deployments/{changed.pk}/approve/", {"revision": 2})
        html = response.content.decode()
        assert response.status_code == 409
        panel = section(html, "proposed-change")
        errors = re.search(r'<ul class="errorlist mt" role="alert" id="decision-errors">(.*?)</ul>', panel, re.S)
        assert "Revision 2 is superseded: it is no longer the change waiting for a decision." in errors.group(1)
        assert "Revision 3 is waiting now; review it." in errors.group(1)
        assert "Proposed change: revision 3" in panel and '<input type="hidden" name="revision" value="3">' in panel
        unchanged(changed, proposed=3)

    def test_a_decision_on_a_withdrawn_change_says_so_without_a_panel(self, world, changed):
        services.deployment_withdraw(deployment_id=changed.pk, user=world.users["member"], revision=2)
        response = world.browser("platform_admin").post(
            f"/deployments/{changed.pk}/reject/", {"revision": 2, "reason": "x"}
        )
        html = response.content.decode()
        assert response.status_code == 409 and 'id="proposed-change"' not in html
        assert "Revision 2 is withdrawn" in section(html, "decision-result")
        unchanged(changed, proposed=None)

    def test_a_rejection_needs_a_reason_and_then_leaves_what_runs_alone(self, world, changed):
        client = world.browser("platform_admin")
        response = client.post(f"/deployments/{changed.pk}/reject/", {"revision": 2, "reason": " "})
        assert response.status_code == 400 and "Give a reason for the rejection." in response.content.decode()
        unchanged(changed)
        response = client.post(f"/deployments/{changed.pk}/reject/", {"revision": 2, "reason": "Too long"}, follow=True)
        assert "Rejected revision 2; revision 1 keeps running, untouched." in response.content.decode()
        unchanged(changed, proposed=None)
        assert changed.revisions.get(number=2).decision_reason == "Too long"

    @pytest.mark.parametrize("value", ["", "x", "0", "2.5", "99999999999999999999"])
    def test_a_garbled_revision_is_a_form_error(self, world, changed, value):
        response = world.browser("platform_admin").post(f"/deployments/{changed.pk}/approve/", {"revision": value})
        assert response.status_code == 400 and 'id="decision-errors"' in response.content.decode()
        unchanged(changed)

    def test_an_unknown_revision_is_a_form_error(self, world, changed):
        response = world.browser("platform_admin").post(f"/deployments/{changed.pk}/approve/", {"revision": 9})
        assert response.status_code == 400 and "Deployment llama-chat has no revision 9." in response.content.decode()
        unchanged(changed)

    def test_a_member_cannot_approve(self, world, changed):
        response = world.browser("member").post(f"/deployments/{changed.pk}/approve/", {"revision": 2}, follow=True)
        assert "Only platform admins or the tenant&#x27;s policy may approve a deployment." in response.content.decode()
        unchanged(changed)


class TestWhatAnEditBecame:
    def edit(self, world, dep, role="member", **changes):
        from tests.deployments.test_ui_parity import form_data

        return world.browser(role).post(f"/deployments/{dep.pk}/edit/", form_data(dep, **changes), follow=True)

    def test_a_change_to_what_runs_waits_while_the_serving_revision_runs(self, world, serving):
        html = self.edit(world, serving, max_model_len=4096).content.decode()
        assert "Revision 2 waits for a platform admin&#x27;s approval; revision 1 keeps running meanwhile." in html
        assert 'id="proposed-change"' in html
        unchanged(serving)

    def test_a_change_that_needs_no_approval_serves_at_once(self, world, serving):
        html = self.edit(world, serving, served_model_name="llama-renamed").content.decode()
        assert "Revision 2 is serving now: it needs no approval." in html
        unchanged(serving, serving=2, proposed=None)

    def test_a_change_the_policy_covers_serves_at_once(self, world, serving):
        world.alpha.auto_approve_max_gpus = 8
        world.alpha.save()
        html = self.edit(world, serving, max_model_len=4096).content.decode()
        assert "Revision 2 is serving now: approved by your tenant&#x27;s policy." in html
        unchanged(serving, serving=2, proposed=None)

    def test_the_form_starts_from_the_waiting_change(self, world, changed):
        html = page(world, "member", f"/deployments/{changed.pk}/edit/")
        assert re.search(r'name="max_model_len"[^>]*value="4096"', html)
        assert "You are editing revision 2, which waits for approval" in html
        data = {"max_model_len": 4096, "max_replicas": 3}
        response = self.edit(world, changed, **data)
        assert "Nothing changed." in response.content.decode()
        unchanged(changed)

    def test_editing_a_request_says_nothing_runs_yet(self, world):
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        html = self.edit(world, dep, max_model_len=4096).content.decode()
        assert "Revision 2 replaces your request and waits for a platform admin&#x27;s approval" in html
        assert "keeps running" not in html and "keeps serving" not in html

    def test_scaling_up_says_it_waits_and_what_keeps_running(self, world, serving):
        response = world.browser("member").post(
            f"/deployments/{serving.pk}/scale/", {"min_replicas": 1, "max_replicas": 4}, follow=True
        )
        html = response.content.decode()
        assert "Revision 2 waits for a platform admin&#x27;s approval; revision 1 keeps running meanwhile." in html
        unchanged(serving)


class TestHistory:
    @pytest.fixture
    def storied(self, world, serving):
        """1 approved by an admin, 2 approved by the policy (a rename), 3 waiting."""
        propose(world, serving, served_model_name="llama-renamed")
        return propose(world, serving, max_model_len=4096)

    def test_every_revision_with_who_when_why_and_what_changed(self, world, storied):
        html = page(world, "viewer", f"/deployments/{storied.pk}/revisions/")
        rows = {int(n): row for n, row in re.findall(r'<tr data-revision="(\d+)"(.*?)</tr>', html, re.S)}
        assert sorted(rows) == [1, 2, 3]
        assert 'data-status="approved"' in rows[1] and "platform-admin" in rows[1] and "Requested." in rows[1]
        assert f"The request ({len(SPEC_FIELDS)} settings)" in rows[1]
        assert 'data-serving="true"' in rows[2] and "Serving" in rows[2]
        assert "policy" in rows[2] and "Needs no approval" in rows[2]
        assert "<strong>Served model name</strong>: llama3-8b → llama-renamed" in rows[2]
        assert "Waiting for approval" in rows[3] and "waiting" in rows[3] and "alpha-member" in rows[3]
        assert "<strong>Max model length</strong>: 8192 → 4096" in rows[3]
        assert "Roll back" not in html  # a viewer

    def test_roll_back_is_offered_on_approved_revisions_that_do_not_serve(self, world, storied):
        html = page(world, "member", f"/deployments/{storied.pk}/revisions/")
        assert html.count("Roll back to revision") == 1 and "Roll back to revision 1" in html
        form = re.search(rf'<form method="post" action="/deployments/{storied.pk}/rollback/">.*?</form>', html, re.S)
        assert '<input type="hidden" name="revision" value="1">' in form.group(0)

    def test_a_roll_back_goes_through_the_same_rules(self, world, storied):
        response = world.browser("member").post(f"/deployments/{storied.pk}/rollback/", {"revision": 1}, follow=True)
        html = response.content.decode()
        # Only the served name differs from revision 1: that needs no approval, so it serves at once.
        assert "Roll back to revision 1: Revision 4 is serving now: it needs no approval." in html
        storied.refresh_from_db()
        assert storied.serving_revision.number == 4 and storied.serving_revision.rollback_of == 1
        assert storied.served_model_name == "llama3-8b"

    def test_rolling_back_to_what_serves_is_refused(self, world, storied):
        response = world.browser("member").post(f"/deployments/{storied.pk}/rollback/", {"revision": 2}, follow=True)
        assert "Revision 2 is the one serving." in response.content.decode()
        unchanged(storied, serving=2, proposed=3)

    def test_a_viewer_cannot_roll_back_and_another_tenant_sees_nothing(self, world, storied):
        response = world.browser("viewer").post(f"/deployments/{storied.pk}/rollback/", {"revision": 1}, follow=True)
        assert "Only members of the tenant may roll back a deployment." in response.content.decode()
        assert world.browser("other_member").get(f"/deployments/{storied.pk}/revisions/").status_code == 404
        unchanged(storied, serving=2, proposed=3)


class TestDiff:
    def test_it_starts_with_the_newest_against_the_serving_revision(self, world, changed):
        html = page(world, "viewer", f"/deployments/{changed.pk}/revisions/diff/")
        assert "Revision 1 → revision 2" in html
        assert re.search(r'<option value="1" selected>Revision 1</option>', html)
        assert re.search(r"<th scope=\"row\">Max model length</th><td><del>8192</del></td>", html)

    def test_any_two_revisions(self, world, changed):
        propose(world, changed, max_model_len=2048)
        html = page(world, "member", f"/deployments/{changed.pk}/revisions/diff/?from=2&to=3")
        rows = dict(re.findall(r'<tr data-field="(\w+)">(.*?)</tr>', html, re.S))
        assert list(rows) == ["max_model_len"] and "4096" in rows["max_model_len"] and "2048" in rows["max_model_len"]
        same = page(world, "member", f"/deployments/{changed.pk}/revisions/diff/?from=2&to=2")
        assert "The two revisions have the same spec." in same

    @pytest.mark.parametrize(
        "query", ["from=abc&to=1", "from=1&to=99", "from=0&to=1", "from=1", "to=", "from=1e3&to=1", "from=%00&to=1"]
    )
    def test_bad_input_is_a_form_error(self, world, changed, query):
        response = world.browser("member").get(f"/deployments/{changed.pk}/revisions/diff/?{query}")
        html = response.content.decode()
        assert response.status_code == 400 and 'class="error"' in html and '<table class="diff"' not in html

    def test_another_tenant_sees_nothing(self, world, changed):
        assert world.browser("other_member").get(f"/deployments/{changed.pk}/revisions/diff/").status_code == 404


class TestApprovalsPage:
    def test_every_proposed_revision_with_its_change(self, world, changed):
        request = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, name="fresh")
        )
        html = page(world, "platform_admin", "/approvals/")
        first = section(html, f"proposal-{request.proposed_revision.pk}")
        change = section(html, f"proposal-{changed.proposed_revision.pk}")
        assert "Deployments (2)" in html
        assert "New request" in first and "0 → 2 (+2)" in first and "Approving it starts the deployment" in first
        assert "Change: revision 1 serves now (ready)" in change and "2 → 3 (+1)" in change
        assert "$7.80/h → $11.70/h (+$3.90/h)" in change and "Max model length" in change
        for block, number, dep in ((first, 1, request), (change, 2, changed)):
            assert f'<input type="hidden" name="deployment" value="{dep.pk}">' in block
            assert f'<input type="hidden" name="revision" value="{number}">' in block

    def test_approve_from_the_page(self, world, changed):
        data = {"deployment": changed.pk, "revision": 2, "decision": "approve"}
        response = world.browser("platform_admin").post("/approvals/", data, follow=True)
        html = response.content.decode()
        assert response.redirect_chain == [("/approvals/", 302)]
        assert "Approved revision 2" in html and 'id="no-proposals"' in html
        unchanged(changed, serving=2, proposed=None, gpus=3)

    def test_a_stale_decision_is_an_error_beside_the_newer_revision(self, world, changed):
        propose(world, changed, max_model_len=2048)
        data = {"deployment": changed.pk, "revision": 2, "decision": "approve"}
        response = world.browser("platform_admin").post("/approvals/", data)
        block = section(response.content.decode(), f"proposal-{changed.proposed_revision.pk}")
        assert response.status_code == 409 and "llama-chat</a> · revision 3</h3>" in block
        assert "Revision 2 is superseded" in block and 'id="decision-errors"' in block
        unchanged(changed, proposed=3)

    def test_a_decision_on_what_is_gone_is_an_error_on_top(self, world, changed):
        services.deployment_withdraw(deployment_id=changed.pk, user=world.users["member"], revision=2)
        data = {"deployment": changed.pk, "revision": 2, "decision": "reject", "reason": "no"}
        response = world.browser("platform_admin").post("/approvals/", data)
        html = response.content.decode()
        assert response.status_code == 409 and 'id="no-proposals"' in html
        assert re.search(r'id="decision-errors"><li>Revision 2 is withdrawn', html)
        unchanged(changed, proposed=None)

    def test_reject_from_the_page_needs_a_reason(self, world, changed):
        data = {"deployment": changed.pk, "revision": 2, "decision": "reject", "reason": ""}
        response = world.browser("platform_admin").post("/approvals/", data)
        assert response.status_code == 400 and "Give a reason for the rejection." in response.content.decode()
        unchanged(changed)

    @pytest.mark.parametrize("role", ["viewer", "member", "tenant_admin", "other_member"])
    def test_only_platform_admins_decide(self, world, changed, role):
        data = {"deployment": changed.pk, "revision": 2, "decision": "approve"}
        assert world.browser(role).post("/approvals/", data).status_code == 403
        unchanged(changed)

    def test_the_inbox_counts_proposed_revisions(self, world, changed):
        services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, name="fresh"))
        from portal.inbox import pending_counts

        assert pending_counts()["deployments"] == 2
        html = page(world, "platform_admin", "/")
        assert 'title="2 deployments, 0 quota changes">2<' in html


def test_the_timeline_uses_state_labels(world, serving):
    html = page(world, "member", f"/deployments/{serving.pk}/timeline/")
    assert "Pending approval → Approved" in html and "pending_approval" not in html


def test_proposed_revisions_of_deleted_deployments_are_not_counted(world, changed):
    from portal.inbox import pending_counts

    ModelDeployment.objects.filter(pk=changed.pk).update(state=State.DELETED)
    assert pending_counts()["deployments"] == 0
    assert DeploymentRevision.objects.filter(status=P.PROPOSED).count() == 1
