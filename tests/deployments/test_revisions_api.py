"""/api/v1/deployments/<id>/revisions/: a change to a running deployment is a proposed revision
that leaves what serves alone; decisions are bound to a revision number; history, diff, rollback;
hostile numbers are 400 on the field (query, body) or 404 (path), never a server error."""

from __future__ import annotations

import pytest

from core.models import AuditEvent
from deployments import services
from deployments.models import ModelDeployment
from quotas.models import QuotaReservation
from tests.support.factories import draft

API = "/api/v1/deployments"
BIG = 2**64


@pytest.fixture
def running(world) -> ModelDeployment:
    """alpha's llama-chat (2 × H100, max model length 8192), approved as revision 1 and ready."""
    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    ModelDeployment.objects.filter(pk=dep.pk).update(state="ready")
    return ModelDeployment.objects.get(pk=dep.pk)


def patch(world, dep, role="member", **fields):
    return world.client(role).patch(f"{API}/{dep.pk}/", fields, format="json")


def post(world, path, role="platform_admin", body=None):
    return world.client(role).post(f"{API}/{path}", body or {}, format="json")


def snapshot(dep) -> tuple:
    row = ModelDeployment.objects.get(pk=dep.pk)
    revisions = tuple(row.revisions.order_by("number").values_list("number", "status"))
    return row.state, row.reserved_gpus, row.generation, row.max_model_len, row.serving_revision_id, revisions


def audited(dep, action: str) -> list[tuple[str, int]]:
    entries = AuditEvent.objects.filter(
        object_type="deployments.modeldeployment", object_id=str(dep.pk), action=action
    ).order_by("id")
    return [(e.actor_name, e.changes.get("revision")) for e in entries]


class TestProposingAChange:
    def test_a_patched_running_deployment_keeps_its_state_gpus_and_spec_and_shows_the_proposal(self, world, running):
        response = patch(world, running, max_model_len=4096)
        assert response.status_code == 200, response.content
        body = response.json()
        assert (body["state"], body["reserved_gpus"], body["max_model_len"], body["generation"]) == (
            "ready",
            2,
            8192,
            1,
        )
        assert (body["serving_revision"], body["pending_revision"]) == (1, 2)
        proposed = body["proposed_revision"]
        assert proposed["number"] == 2 and proposed["status"] == "proposed"
        assert proposed["proposed_by"] == "alpha-member" and proposed["rollback_of"] is None
        assert proposed["changes"] == [
            {"field": "max_model_len", "label": "Max model length", "before": "8192", "after": "4096"}
        ]
        assert (proposed["gpus_before"], proposed["gpus_after"], proposed["gpu_delta"]) == (2, 2, 0)
        assert (proposed["cost_before"], proposed["cost_after"], proposed["cost_delta"]) == ("7.80", "7.80", "0.00")
        assert proposed["how"] == "in_place" and proposed["swap_gpus"] == 2
        assert QuotaReservation.objects.get(owner_id=running.pk, released__isnull=True).gpus == 2
        listed = world.client("member").get(f"{API}/").json()["results"][0]
        assert (listed["serving_revision"], listed["pending_revision"]) == (1, 2)
        assert "proposed_revision" not in listed  # the list stays cheap: numbers only

    def test_more_gpus_show_the_delta_and_the_cost(self, world, running):
        proposed = patch(world, running, max_replicas=4).json()["proposed_revision"]
        assert (proposed["gpus_before"], proposed["gpus_after"], proposed["gpu_delta"]) == (2, 4, 2)
        assert proposed["cost_delta"] == "7.80"

    def test_a_request_never_approved_shows_revision_one_as_a_start(self, world):
        created = world.client("member").post(
            f"{API}/", {**draft(world, name="fresh"), "flavor": "h100-sxm5", "tenant": "alpha"}, format="json"
        )
        body = created.json()
        assert (body["state"], body["serving_revision"], body["pending_revision"]) == ("pending_approval", None, 1)
        assert body["proposed_revision"]["how"] == "start" and body["proposed_revision"]["gpus_before"] == 0
        assert body["proposed_revision"]["gpus_after"] == 2


class TestDeciding:
    def test_approving_a_stale_number_is_409_and_changes_nothing(self, world, running):
        patch(world, running, max_model_len=4096)
        patch(world, running, max_model_len=2048)  # revision 3 supersedes revision 2
        before = snapshot(running)
        for path, body in (
            (f"{running.pk}/approve/", {"revision": 2}),
            (f"{running.pk}/approve/", {"revision": 1}),
            (f"{running.pk}/revisions/2/approve/", {}),
            (f"{running.pk}/reject/", {"revision": 2, "reason": "no"}),
        ):
            response = post(world, path, body=body)
            assert response.status_code == 409, (path, response.content)
            assert response.json()["code"] == "stale_revision" and "revision" in response.json()
        assert snapshot(running) == before
        assert audited(running, "deployment.approve") == [("platform-admin", 1)]

    @pytest.mark.parametrize("path", ["{pk}/approve/", "{pk}/revisions/2/approve/"])
    def test_approving_the_reviewed_number_makes_it_serve_and_bumps_the_generation(self, world, running, path):
        patch(world, running, max_model_len=4096)
        body = {"revision": 2, "reason": "fine"} if "revisions" not in path else {"reason": "fine"}
        response = post(world, path.format(pk=running.pk), body=body)
        assert response.status_code == 200, response.content
        body = response.json()
        assert (body["serving_revision"], body["pending_revision"], body["proposed_revision"]) == (2, None, None)
        assert (body["state"], body["max_model_len"], body["generation"], body["reserved_gpus"]) == (
            "ready",
            4096,
            2,
            2,
        )
        assert audited(running, "deployment.approve")[-1] == ("platform-admin", 2)

    @pytest.mark.parametrize("path", ["{pk}/reject/", "{pk}/revisions/2/reject/"])
    def test_rejecting_a_change_leaves_what_serves_untouched(self, world, running, path):
        patch(world, running, max_model_len=4096)
        body = {"revision": 2, "reason": "not now"} if "revisions" not in path else {"reason": "not now"}
        before = snapshot(running)
        response = post(world, path.format(pk=running.pk), body=body)
        assert response.status_code == 200, response.content
        assert response.json()["pending_revision"] is None and response.json()["serving_revision"] == 1
        after = snapshot(running)
        assert after[:5] == before[:5] and after[5] == ((1, "approved"), (2, "rejected"))
        revision = world.client("member").get(f"{API}/{running.pk}/revisions/2/").json()
        assert (revision["decided_by"], revision["decision_reason"]) == ("platform-admin", "not now")
        assert audited(running, "deployment.reject") == [("platform-admin", 2)]

    @pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}, {"reason": "a\x00b"}])
    def test_a_rejection_needs_a_reason(self, world, running, body):
        patch(world, running, max_model_len=4096)
        before = snapshot(running)
        response = post(world, f"{running.pk}/revisions/2/reject/", body=body)
        assert response.status_code == 400 and "reason" in response.json(), response.content
        assert snapshot(running) == before

    @pytest.mark.parametrize("path", ["{pk}/withdraw/", "{pk}/revisions/2/withdraw/"])
    def test_a_member_withdraws_a_change_and_what_serves_runs_on(self, world, running, path):
        patch(world, running, max_model_len=4096)
        before = snapshot(running)
        response = post(world, path.format(pk=running.pk), role="member", body={"revision": 2})
        assert response.status_code == 200, response.content
        after = snapshot(running)
        assert after[:5] == before[:5] and after[5] == ((1, "approved"), (2, "withdrawn"))
        assert audited(running, "deployment.withdraw") == [("alpha-member", 2)]
        again = post(world, path.format(pk=running.pk), role="member", body={"revision": 2})
        assert again.status_code == 409 and again.json()["code"] == "stale_revision"

    def test_a_person_stop_releases_the_gpus_at_once_and_the_change_keeps_waiting(self, world, running):
        patch(world, running, max_model_len=4096)
        body = post(world, f"{running.pk}/stop/", role="member").json()
        assert (body["state"], body["reserved_gpus"], body["pending_revision"]) == ("stopped", 0, 2)
        assert not QuotaReservation.objects.filter(owner_id=running.pk, released__isnull=True).exists()

    def test_cancel_is_only_for_a_request_never_approved(self, world, running):
        response = post(world, f"{running.pk}/cancel/", role="member")
        assert response.status_code == 409 and snapshot(running)[0] == "ready"


class TestRollback:
    def approve_change(self, world, dep, **fields):
        number = patch(world, dep, **fields).json()["pending_revision"]
        assert post(world, f"{dep.pk}/approve/", body={"revision": number}).status_code == 200
        return number

    def test_it_proposes_the_old_spec_under_the_same_rules(self, world, running):
        self.approve_change(world, running, max_model_len=4096)
        response = post(world, f"{running.pk}/revisions/1/rollback/", role="member")
        assert response.status_code == 200, response.content
        body = response.json()
        assert (body["serving_revision"], body["pending_revision"], body["max_model_len"]) == (2, 3, 4096)
        proposed = body["proposed_revision"]
        assert proposed["rollback_of"] == 1 and proposed["message"] == "Roll back to revision 1."
        assert proposed["changes"] == [
            {"field": "max_model_len", "label": "Max model length", "before": "4096", "after": "8192"}
        ]
        assert audited(running, "deployment.rollback") == [("alpha-member", 3)]
        assert post(world, f"{running.pk}/revisions/3/approve/", role="member").status_code == 403
        approved = post(world, f"{running.pk}/revisions/3/approve/")
        assert approved.status_code == 200
        assert (approved.json()["serving_revision"], approved.json()["max_model_len"]) == (3, 8192)
        assert approved.json()["generation"] == 3

    def test_a_rollback_the_policy_covers_serves_at_once(self, world, running):
        self.approve_change(world, running, max_model_len=4096)
        world.alpha.auto_approve_max_gpus = 4
        world.alpha.save()
        body = post(world, f"{running.pk}/revisions/1/rollback/", role="member").json()
        assert (body["serving_revision"], body["pending_revision"], body["max_model_len"]) == (3, None, 8192)
        assert audited(running, "deployment.approve")[-1] == ("policy", 3)

    def test_what_cannot_be_rolled_back(self, world, running):
        self.approve_change(world, running, max_model_len=4096)
        patch(world, running, max_model_len=2048)  # revision 3, proposed
        before = snapshot(running)
        serving = post(world, f"{running.pk}/revisions/2/rollback/", role="member")
        assert serving.status_code == 409 and serving.json()["code"] == "serving"
        proposed = post(world, f"{running.pk}/revisions/3/rollback/", role="member")
        assert proposed.status_code == 409 and proposed.json()["code"] == "invalid_transition"
        assert post(world, f"{running.pk}/revisions/1/rollback/", role="viewer").status_code == 403
        assert snapshot(running) == before


class TestHistoryAndDiff:
    def test_history_says_who_proposed_and_decided_each_revision(self, world, running):
        patch(world, running, max_model_len=4096)
        post(world, f"{running.pk}/approve/", body={"revision": 2, "reason": "ok"})
        patch(world, running, served_model_name="renamed")  # needs no approval: the policy decides
        patch(world, running, max_model_len=2048)
        response = world.client("viewer").get(f"{API}/{running.pk}/revisions/")
        assert response.status_code == 200
        rows = response.json()["results"]
        assert [(r["number"], r["status"], r["serving"]) for r in rows] == [
            (4, "proposed", False),
            (3, "approved", True),
            (2, "approved", False),
            (1, "approved", False),
        ]
        assert [(r["proposed_by"], r["decided_by"]) for r in rows] == [
            ("alpha-member", None),
            ("alpha-member", "policy"),
            ("alpha-member", "platform-admin"),
            ("alpha-member", "platform-admin"),
        ]
        assert rows[1]["changes"] == [
            {"field": "served_model_name", "label": "Served model name", "before": "llama3-8b", "after": "renamed"}
        ]
        assert rows[0]["spec"]["max_model_len"] == 2048 and rows[0]["spec"]["flavor"] == "h100-sxm5"
        assert rows[0]["gpus"] == 2 and rows[0]["decided_at"] is None and rows[2]["decision_reason"] == "ok"
        assert rows[3]["changes"][0] == {
            "field": "model_source",
            "label": "Model source",
            "before": "",
            "after": ("meta-llama/Meta-Llama-3-8B-Instruct"),
        }
        one = world.client("member").get(f"{API}/{running.pk}/revisions/3/").json()
        assert one == rows[1]

    def test_the_history_pages(self, world, running):
        for length in (4096, 2048, 1024):
            patch(world, running, max_model_len=length)
        page = world.client("member").get(f"{API}/{running.pk}/revisions/?limit=2&offset=1").json()
        assert page["count"] == 4 and [r["number"] for r in page["results"]] == [3, 2]
        assert page["results"][1]["changes"][0]["before"] == "8192"  # against revision 1, off the page

    def test_a_diff_between_any_two_revisions(self, world, running):
        patch(world, running, max_model_len=4096, max_replicas=3)
        client = world.client("member")
        forward = client.get(f"{API}/{running.pk}/revisions/diff/?from=1&to=2").json()
        assert forward == {
            "from": 1,
            "to": 2,
            "changes": [
                {"field": "max_replicas", "label": "Maximum replicas", "before": "2", "after": "3"},
                {"field": "max_model_len", "label": "Max model length", "before": "8192", "after": "4096"},
            ],
        }
        back = client.get(f"{API}/{running.pk}/revisions/diff/?from=2&to=1").json()["changes"]
        assert [(r["before"], r["after"]) for r in back] == [("3", "2"), ("4096", "8192")]
        assert client.get(f"{API}/{running.pk}/revisions/diff/?from=2&to=2").json()["changes"] == []


HOSTILE_NUMBERS = ["abc", "0", "-1", str(BIG), "1.5", "%00", "1%00", "", "1e3"]


class TestHostileNumbers:
    @pytest.mark.parametrize("value", HOSTILE_NUMBERS)
    def test_a_bad_diff_number_is_a_400_on_that_parameter(self, world, running, value):
        response = world.client("member").get(f"{API}/{running.pk}/revisions/diff/?from={value}&to=1")
        assert response.status_code == 400 and list(response.json()) == ["from"], response.content

    def test_missing_diff_numbers_are_400_naming_each(self, world, running):
        response = world.client("member").get(f"{API}/{running.pk}/revisions/diff/")
        assert response.status_code == 400 and set(response.json()) == {"from", "to"}

    @pytest.mark.parametrize("query", ["from=1&to=9", "from=9&to=1", "from=2147483647&to=1"])
    def test_a_diff_naming_a_missing_revision_is_404(self, world, running, query):
        response = world.client("member").get(f"{API}/{running.pk}/revisions/diff/?{query}")
        assert response.status_code == 404 and "has no revision" in response.json()["detail"]

    @pytest.mark.parametrize("number", ["9", str(BIG), "-1", "abc", "1.0", "%00", "2147483648"])
    def test_a_bad_number_in_the_path_is_404_and_changes_nothing(self, world, running, number):
        patch(world, running, max_model_len=4096)
        before = snapshot(running)
        admin = world.client("platform_admin")
        assert admin.get(f"{API}/{running.pk}/revisions/{number}/").status_code == 404
        for verb in ("approve", "reject", "withdraw", "rollback"):
            response = admin.post(f"{API}/{running.pk}/revisions/{number}/{verb}/", {"reason": "x"}, format="json")
            assert response.status_code == 404, (verb, response.status_code)
        assert snapshot(running) == before

    @pytest.mark.parametrize("value", ["abc", 0, -1, BIG, 2**63, 1.5, None, "\x00", "2\x00", True, [], {"n": 2}, "NaN"])
    @pytest.mark.parametrize("action", ["approve", "reject", "withdraw"])
    def test_a_bad_revision_in_a_body_is_400_on_the_field(self, world, running, action, value):
        patch(world, running, max_model_len=4096)
        before = snapshot(running)
        role = "member" if action == "withdraw" else "platform_admin"
        body = {"revision": value, "reason": "why"}
        response = post(world, f"{running.pk}/{action}/", role=role, body=body)
        assert response.status_code == 400 and "revision" in response.json(), response.content
        assert snapshot(running) == before

    @pytest.mark.parametrize("action", ["approve", "reject", "withdraw"])
    def test_a_missing_or_unknown_revision_in_a_body_is_400_on_the_field(self, world, running, action):
        role = "member" if action == "withdraw" else "platform_admin"
        missing = post(world, f"{running.pk}/{action}/", role=role, body={"reason": "why"})
        assert missing.status_code == 400 and "revision" in missing.json()
        patch(world, running, max_model_len=4096)
        unknown = post(world, f"{running.pk}/{action}/", role=role, body={"revision": 99, "reason": "why"})
        assert unknown.status_code == 400 and unknown.json()["code"] == "not_found", unknown.content


class TestVisibility:
    @pytest.mark.parametrize(
        "method, suffix",
        [
            ("get", "revisions/"),
            ("get", "revisions/1/"),
            ("get", "revisions/diff/?from=1&to=2"),
            ("post", "revisions/2/approve/"),
            ("post", "revisions/2/reject/"),
            ("post", "revisions/2/withdraw/"),
            ("post", "revisions/1/rollback/"),
            ("post", "withdraw/"),
        ],
    )
    def test_another_tenant_sees_nothing_and_anonymous_is_401(self, world, running, method, suffix):
        patch(world, running, max_model_len=4096)
        before = snapshot(running)
        for role, want in (("other_member", 404), ("anonymous", 401)):
            client, url = world.client(role), f"{API}/{running.pk}/{suffix}"
            if method == "post":
                response = client.post(url, {"revision": 2, "reason": "x"}, format="json")
            else:
                response = client.get(url)
            assert response.status_code == want, (role, response.status_code)
        assert snapshot(running) == before

    def test_a_deleted_deployment_has_no_revisions_to_show(self, world, running):
        ModelDeployment.objects.filter(pk=running.pk).update(state="deleted")
        assert world.client("platform_admin").get(f"{API}/{running.pk}/revisions/").status_code == 404


class TestQueries:
    def test_the_list_reads_the_revision_numbers_in_its_one_statement(self, world, django_assert_num_queries):
        member = world.users["member"]
        for i in range(6):
            dep = services.deployment_create(
                tenant=world.alpha, user=member, data=draft(world, name=f"q{i}", max_replicas=1)
            )
            if i % 2:
                services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
                services.deployment_update(deployment_id=dep.pk, user=member, data={"max_model_len": 4096})
        client = world.client("member")
        client.get(f"{API}/")  # warm the session and the content types
        with django_assert_num_queries(2):  # the count and the page, whatever the page holds
            rows = client.get(f"{API}/").json()["results"]
        assert {(r["serving_revision"], r["pending_revision"]) for r in rows} == {(None, 1), (1, 2)}


class TestLifecycleFieldsAreNotWritable:
    def test_a_patch_cannot_set_the_state_the_gpus_or_the_serving_revision(self, world):
        """A hostile member PATCHes the lifecycle fields beside a real change: only the change is
        proposed; the never-approved request stays pending with no GPUs and nothing serving."""
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        answer = patch(
            world, dep, state="ready", reserved_gpus=99, serving_revision=1, generation=7, max_model_len=4096
        )
        assert answer.status_code == 200, answer.content
        row = ModelDeployment.objects.get(pk=dep.pk)
        assert (row.state, row.reserved_gpus, row.serving_revision_id, row.max_model_len) == (
            "pending_approval",
            0,
            None,
            4096,
        )
        assert list(row.revisions.order_by("number").values_list("number", "status")) == [
            (1, "superseded"),
            (2, "proposed"),
        ]
        assert not QuotaReservation.objects.filter(owner_id=dep.pk, released__isnull=True).exists()
