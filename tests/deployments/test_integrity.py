"""The approval chain's promise, finding by finding: only approved work runs.

Each test names a way around approval that worked before the (role, state, action) table and
shows it refused now, with nothing changed behind the refusal.
"""

from __future__ import annotations

import pytest

from core.models import AuditEvent
from deployments import services
from deployments.choices import RevisionStatus, State
from deployments.models import ModelDeployment
from quotas.models import TenantQuota
from tests.support.factories import api_draft

API = "/api/v1/deployments"


def reserved(world) -> int:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100).reserved_gpus


def audit_actions(dep_id: int) -> list[tuple[str, str]]:
    return list(
        AuditEvent.objects.filter(object_type="deployments.modeldeployment", object_id=str(dep_id))
        .order_by("id")
        .values_list("action", "actor_name")
    )


def request_one(world, **overrides) -> dict:
    response = world.client("member").post(f"{API}/", api_draft(world, **overrides), format="json")
    assert response.status_code == 201, response.content
    return response.json()


def approve(world, body: dict) -> dict:
    """Approve the revision the admin reviewed: the one the deployment says is waiting."""
    response = world.client("platform_admin").post(
        f"{API}/{body['id']}/approve/", {"revision": body["pending_revision"]}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


class TestNoSelfApproval:
    def test_a_member_cannot_start_their_own_pending_request(self, world):
        body = request_one(world)
        response = world.client("member").post(f"{API}/{body['id']}/start/", format="json")
        assert response.status_code == 409
        assert ModelDeployment.objects.get(pk=body["id"]).state == State.PENDING_APPROVAL
        assert reserved(world) == 0
        assert audit_actions(body["id"]) == [("deployment.request", "alpha-member")]

    def test_a_tenant_admin_cannot_approve_either(self, world):
        body = request_one(world)
        response = world.client("tenant_admin").post(f"{API}/{body['id']}/approve/", {"revision": 1}, format="json")
        assert response.status_code == 403 and reserved(world) == 0

    def test_starting_a_failed_deployment_runs_its_approved_revision_not_the_waiting_change(self, world):
        body = approve(world, request_one(world))
        services.deployment_observe(deployment_id=body["id"], generation=1, state=State.FAILED, conditions=[])
        member = world.client("member")
        member.patch(f"{API}/{body['id']}/", {"model_source": "org/unreviewed"}, format="json")
        assert member.post(f"{API}/{body['id']}/start/").status_code == 200
        row = ModelDeployment.objects.get(pk=body["id"])
        assert (row.state, row.model_source, row.reserved_gpus) == (State.APPROVED, body["model_source"], 2)
        assert row.proposed_revision.spec["model_source"] == "org/unreviewed"


class TestRejectedIsFinal:
    def test_a_rejected_request_cannot_be_edited_back_to_pending_nor_started(self, world):
        body = request_one(world)
        admin = world.client("platform_admin")
        rejected = admin.post(f"{API}/{body['id']}/reject/", {"revision": 1, "reason": "too big"}, format="json")
        assert rejected.status_code == 200
        member = world.client("member")
        edit = member.patch(f"{API}/{body['id']}/", {"model_source": "org/other-model"}, format="json")
        assert edit.status_code == 409 and "final" in edit.json()["detail"]
        assert member.post(f"{API}/{body['id']}/start/").status_code == 409
        row = ModelDeployment.objects.get(pk=body["id"])
        assert (row.state, row.generation, row.model_source) == (State.REJECTED, 1, body["model_source"])
        assert reserved(world) == 0

    def test_the_detail_page_says_so(self, world):
        body = request_one(world)
        world.client("platform_admin").post(
            f"{API}/{body['id']}/reject/", {"revision": 1, "reason": "no"}, format="json"
        )
        page = world.browser("member").get(f"/deployments/{body['id']}/").content.decode()
        assert "Rejected requests are final" in page


class TestApprovalBindsTheReviewedRevision:
    def test_an_approval_of_a_stale_revision_is_409_and_changes_nothing(self, world):
        body = request_one(world)
        world.client("member").patch(f"{API}/{body['id']}/", {"max_model_len": 2048}, format="json")
        response = world.client("platform_admin").post(f"{API}/{body['id']}/approve/", {"revision": 1}, format="json")
        assert response.status_code == 409
        assert response.json() == {"revision": [response.json()["revision"][0]], "code": "stale_revision"}
        row = ModelDeployment.objects.get(pk=body["id"])
        assert (row.state, row.proposed_number, row.reserved_gpus) == (State.PENDING_APPROVAL, 2, 0)
        assert ("deployment.approve", "platform-admin") not in audit_actions(body["id"])

    def test_an_approval_without_a_revision_is_a_400_naming_it(self, world):
        body = request_one(world)
        response = world.client("platform_admin").post(f"{API}/{body['id']}/approve/", {}, format="json")
        assert response.status_code == 400 and "revision" in response.json()

    def test_the_revision_field_is_documented_in_openapi(self, world):
        schema = world.client("member").get("/api/schema/", HTTP_ACCEPT="application/json").json()
        body = schema["components"]["schemas"]["ApproveRequest"]
        assert "revision" in body["required"] and "409" in body["properties"]["revision"]["description"]

    def test_the_ui_approval_carries_the_revision_shown(self, world):
        body = request_one(world)
        page = world.browser("platform_admin").get("/approvals/").content.decode()
        assert 'name="revision" value="1"' in page
        world.client("member").patch(f"{API}/{body['id']}/", {"max_model_len": 2048}, format="json")
        response = world.browser("platform_admin").post(f"/deployments/{body['id']}/approve/", {"revision": 1})
        assert response.status_code == 409
        assert ModelDeployment.objects.get(pk=body["id"]).state == State.PENDING_APPROVAL


class TestChangesToWhatRuns:
    @pytest.mark.parametrize(
        "change",
        [
            {"model_source": "mistralai/Mistral-7B-Instruct-v0.3"},
            {"flavor": "a100-pcie"},
            {"tensor_parallel_size": 2},
            {"max_replicas": 3},
            {"max_model_len": 2048},
            {"gpu_memory_utilization": 0.8},
            {"dtype": "float16"},
            {"enable_chunked_prefill": False},
        ],
    )
    def test_wait_for_approval_while_the_approved_revision_runs_on_its_gpus(self, world, change):
        body = approve(world, request_one(world))
        response = world.client("member").patch(f"{API}/{body['id']}/", change, format="json")
        assert response.status_code == 200, response.content
        got = response.json()
        assert (got["state"], got["reserved_gpus"], got["generation"]) == (State.APPROVED, 2, 1)
        assert (got["serving_revision"], got["pending_revision"]) == (1, 2)

    def test_scaling_up_through_the_scale_action_waits_for_approval(self, world):
        body = approve(world, request_one(world))
        response = world.client("member").post(
            f"{API}/{body['id']}/scale/", {"min_replicas": 1, "max_replicas": 4}, format="json"
        )
        got = response.json()
        assert (got["state"], got["max_replicas"], got["pending_revision"], reserved(world)) == (
            State.APPROVED,
            2,
            2,
            2,
        )

    def test_cosmetic_changes_serve_at_once(self, world):
        body = approve(world, request_one(world))
        response = world.client("member").patch(f"{API}/{body['id']}/", {"served_model_name": "chat"}, format="json")
        got = response.json()
        assert (got["state"], got["generation"], got["serving_revision"], got["pending_revision"]) == (
            State.APPROVED,
            2,
            2,
            None,
        )

    def test_within_the_policy_the_change_is_approved_by_the_policy(self, world):
        world.alpha.auto_approve_max_gpus = 4
        world.alpha.save()
        body = request_one(world)
        assert body["state"] == State.APPROVED  # the policy approved the request itself
        response = world.client("member").patch(f"{API}/{body['id']}/", {"max_model_len": 2048}, format="json")
        assert (response.json()["state"], response.json()["serving_revision"]) == (State.APPROVED, 2)
        assert audit_actions(body["id"]) == [
            ("deployment.request", "alpha-member"),
            ("deployment.approve", "policy"),
            ("deployment.update", "alpha-member"),
            ("deployment.approve", "policy"),
        ]
        audit = world.client("platform_admin").get("/api/v1/audit/", {"object_id": body["id"]}).json()
        assert "policy" in [row["actor_name"] for row in audit["results"]]

    def test_a_stopped_deployment_changed_starts_on_its_approved_revision(self, world):
        body = approve(world, request_one(world))
        member = world.client("member")
        member.post(f"{API}/{body['id']}/stop/")
        member.patch(f"{API}/{body['id']}/", {"model_source": "org/unreviewed"}, format="json")
        assert member.post(f"{API}/{body['id']}/start/").status_code == 200
        row = ModelDeployment.objects.get(pk=body["id"])
        assert (row.state, row.model_source, row.reserved_gpus) == (State.APPROVED, body["model_source"], 2)
        assert row.revisions.get(number=2).status == RevisionStatus.PROPOSED


class TestBackendIsFixed:
    def test_changing_the_backend_is_a_400_on_the_field_and_changes_nothing(self, world):
        body = approve(world, request_one(world))
        response = world.client("member").patch(
            f"{API}/{body['id']}/", {"backend": "kserve", "max_model_len": 2048}, format="json"
        )
        assert response.status_code == 400 and list(response.json()) == ["backend", "code"]
        row = ModelDeployment.objects.get(pk=body["id"])
        assert (row.backend, row.max_model_len, row.generation) == ("kuberay", 8192, 1)

    def test_sending_the_same_backend_is_fine(self, world):
        body = request_one(world)
        response = world.client("member").patch(f"{API}/{body['id']}/", {"backend": "kuberay"}, format="json")
        assert response.status_code == 200


def test_a_name_starting_with_a_digit_is_a_400_on_name_and_nothing_is_written(world):
    response = world.client("member").post(f"{API}/", {**api_draft(world), "name": "7b-chat"}, format="json")
    assert response.status_code == 400, response.content
    assert "starting with a letter" in response.json()["name"][0]
    assert not ModelDeployment.objects.exists()


class TestDuplicateNames:
    def test_a_second_live_deployment_with_the_name_is_a_400_on_name(self, world):
        request_one(world)
        response = world.client("member").post(f"{API}/", api_draft(world), format="json")
        assert response.status_code == 400 and list(response.json()) == ["name", "code"]
        assert ModelDeployment.objects.filter(name="llama-chat").count() == 1

    def test_the_form_shows_it_on_the_name_field(self, world):
        request_one(world)
        data = {k: ("" if v is None else v) for k, v in api_draft(world).items()}
        data.update(flavor=world.h100.pk, tenant=world.alpha.pk, enable_chunked_prefill="on")
        response = world.browser("member").post("/deployments/new/", data)
        assert response.status_code == 200
        assert "already exists" in str(response.context["form"].errors.get("name")), response.context["form"].errors

    def test_the_name_is_free_again_once_deleted(self, world):
        body = request_one(world)
        world.client("member").delete(f"{API}/{body['id']}/")
        assert world.client("member").post(f"{API}/", api_draft(world), format="json").status_code == 201


class TestRedirectTargets:
    HOSTILE = [
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "\\\\evil.example",
        "javascript:alert(1)",
        "http:/evil.example",
        "approvals",
        " //evil.example",
        "\x00/x",
    ]

    @pytest.mark.parametrize("target", HOSTILE)
    def test_an_action_never_redirects_off_site_nor_fails(self, world, target):
        body = request_one(world)
        response = world.browser("member").post(f"/deployments/{body['id']}/cancel/", {"next": target})
        assert response.status_code == 302 and response["Location"] == f"/deployments/{body['id']}/"

    def test_an_on_site_target_is_followed(self, world):
        body = request_one(world)
        response = world.browser("platform_admin").post(
            f"/deployments/{body['id']}/approve/", {"next": "/approvals/", "revision": 1}
        )
        assert response["Location"] == "/approvals/"

    @pytest.mark.parametrize("target", HOSTILE)
    def test_a_quota_decision_never_redirects_off_site(self, world, target):
        from quotas.models import QuotaChangeRequest

        qcr = QuotaChangeRequest.objects.create(
            tenant=world.alpha,
            flavor=world.h100,
            nominal_gpus=9,
            borrowing_limit_gpus=0,
            requested_by=world.users["tenant_admin"],
        )
        response = world.browser("platform_admin").post(
            f"/quota-requests/{qcr.pk}/reject/", {"next": target, "comment": "no"}
        )
        assert response.status_code == 302 and response["Location"] == "/approvals/"


def test_the_ui_says_when_scaling_up_waits_for_approval(world):
    body = approve(world, request_one(world))
    response = world.browser("member").post(
        f"/deployments/{body['id']}/scale/", {"min_replicas": 1, "max_replicas": 4}, follow=True
    )
    assert "Revision 2 waits for a platform admin&#x27;s approval; revision 1 keeps running" in (
        response.content.decode()
    )
    row = ModelDeployment.objects.get(pk=body["id"])
    assert (row.state, row.max_replicas, row.proposed_number) == (State.APPROVED, 2, 2)


def test_a_stopped_deployment_changed_within_the_policy_is_approved_by_the_policy(world):
    world.alpha.auto_approve_max_gpus = 4
    world.alpha.save()
    body = request_one(world)
    member = world.client("member")
    member.post(f"{API}/{body['id']}/stop/")
    member.patch(f"{API}/{body['id']}/", {"max_model_len": 2048}, format="json")
    assert ModelDeployment.objects.get(pk=body["id"]).state == State.STOPPED
    assert audit_actions(body["id"])[-2:] == [("deployment.update", "alpha-member"), ("deployment.approve", "policy")]
    assert member.post(f"{API}/{body['id']}/start/").status_code == 200


class TestPlacementIsOneRule:
    """Validation and the renderers share runtime.manifests.common.placement_error: a request the
    portal accepts (and reserves GPUs for) always renders."""

    def test_a_replica_that_cannot_be_split_into_whole_nodes_is_refused_at_request(self, world):
        response = world.client("member").post(
            f"{API}/", api_draft(world, tensor_parallel_size=4, pipeline_parallel_size=3), format="json"
        )
        assert response.status_code == 400
        assert (
            "12 GPUs per replica cannot be split into whole 8-GPU nodes" in response.json()["tensor_parallel_size"][0]
        )

    def test_a_kserve_replica_wider_than_a_node_is_refused_at_request(self, world):
        draft = api_draft(world, backend="kserve", tensor_parallel_size=8, pipeline_parallel_size=2)
        response = world.client("member").post(f"{API}/", draft, format="json")
        assert response.status_code == 400 and "need the kuberay backend" in response.json()["tensor_parallel_size"][0]

    def test_a_spec_that_stops_rendering_after_approval_becomes_a_condition(self, world, cluster_api):
        from deployments.reconcile import reconcile

        body = approve(world, request_one(world, tensor_parallel_size=2))
        world.h100.gpus_per_node = 1  # the TP group no longer fits one node
        world.h100.save()
        dep = ModelDeployment.objects.get(pk=body["id"])
        assert reconcile(dep).outcome == "error"
        dep.refresh_from_db()
        assert "Cannot render the workload" in dep.condition("Ready")["message"]
