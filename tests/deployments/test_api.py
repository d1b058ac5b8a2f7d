"""/api/v1/deployments: CRUD, actions, preview, events; every endpoint × every role."""

import pytest
from django.db.models import F

from deployments import services
from deployments.models import ModelDeployment
from tests.support.factories import api_draft, draft
from tests.support.world import check_matrix


@pytest.fixture
def dep(world):
    return services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))


def fresh(world, state: str = "pending_approval") -> ModelDeployment:
    """A new one-GPU deployment of alpha in `state`, through the services: each role of a matrix
    acts on its own, so one role's success does not decide the next role's answer."""
    member = world.users["member"]
    dep = services.deployment_create(
        tenant=world.alpha, user=member, data=draft(world, name=f"d{ModelDeployment.objects.count()}", max_replicas=1)
    )
    if state != "pending_approval":
        services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    if state == "stopped":
        services.deployment_stop(deployment_id=dep.pk, user=member)
    return dep


ANY_MEMBER_READS = {
    "anonymous": 401,
    "viewer": 200,
    "member": 200,
    "tenant_admin": 200,
    "platform_admin": 200,
    "other_member": 404,
}


class TestPermissionMatrix:
    def test_list_shows_only_your_tenants(self, world, dep):
        for role, expected in (("member", 1), ("other_member", 0), ("platform_admin", 1)):
            assert world.client(role).get("/api/v1/deployments/").json()["count"] == expected

    @pytest.mark.parametrize("suffix", ["", "events/", "metrics/?window=1h", "summary/", "advice/"])
    def test_reads(self, world, dep, suffix):
        check_matrix(world, lambda c: c.get(f"/api/v1/deployments/{dep.pk}/{suffix}"), ANY_MEMBER_READS)

    def test_create(self, world):
        counter = iter(range(100))
        check_matrix(
            world,
            lambda c: c.post(
                "/api/v1/deployments/", api_draft(world, name=f"m{next(counter)}", max_replicas=1), format="json"
            ),
            {
                "anonymous": 401,
                "viewer": 403,
                "member": 201,
                "tenant_admin": 201,
                "platform_admin": 201,
                "other_member": 400,
            },
        )  # alpha is not one of their tenants: a field error, nothing leaks

    def test_approve_is_for_platform_admins_only(self, world, dep):
        check_matrix(
            world,
            lambda c: c.post(f"/api/v1/deployments/{dep.pk}/approve/", {"revision": 1}, format="json"),
            {
                "anonymous": 401,
                "viewer": 403,
                "member": 403,
                "tenant_admin": 403,
                "platform_admin": 200,
                "other_member": 404,
            },
        )

    def test_reject_needs_platform_admin_and_a_reason(self, world, dep):
        assert (
            world.client("member")
            .post(f"/api/v1/deployments/{dep.pk}/reject/", {"revision": 1, "reason": "x"}, format="json")
            .status_code
            == 403
        )
        response = world.client("platform_admin").post(f"/api/v1/deployments/{dep.pk}/reject/", {}, format="json")
        assert response.status_code == 400 and set(response.json()) == {"reason", "revision"}

    @pytest.mark.parametrize("action, state", [("cancel", "pending_approval"), ("stop", "ready"), ("start", "stopped")])
    def test_lifecycle_actions_need_member(self, world, action, state):
        check_matrix(
            world,
            lambda c: c.post(f"/api/v1/deployments/{fresh(world, state).pk}/{action}/", {}, format="json"),
            {
                "anonymous": 401,
                "viewer": 403,
                "member": 200,
                "tenant_admin": 200,
                "platform_admin": 200,
                "other_member": 404,
            },
        )

    def test_withdraw_is_for_members(self, world):
        def withdraw(client):
            dep = fresh(world, "ready")
            services.deployment_update(deployment_id=dep.pk, user=world.users["member"], data={"max_model_len": 4096})
            return client.post(f"/api/v1/deployments/{dep.pk}/withdraw/", {"revision": 2}, format="json")

        check_matrix(
            world,
            withdraw,
            {
                "anonymous": 401,
                "viewer": 403,
                "member": 200,
                "tenant_admin": 200,
                "platform_admin": 200,
                "other_member": 404,
            },
        )

    def test_scale_update_delete(self, world, dep):
        other = {"anonymous": 401, "viewer": 403, "other_member": 404}
        check_matrix(
            world,
            lambda c: c.post(
                f"/api/v1/deployments/{dep.pk}/scale/", {"min_replicas": 1, "max_replicas": 1}, format="json"
            ),
            {**other, "member": 200, "tenant_admin": 200, "platform_admin": 200},
        )
        check_matrix(
            world,
            lambda c: c.patch(f"/api/v1/deployments/{dep.pk}/", {"max_model_len": 4096}, format="json"),
            {**other, "member": 200, "tenant_admin": 200, "platform_admin": 200},
        )
        check_matrix(
            world,
            lambda c: c.delete(f"/api/v1/deployments/{fresh(world).pk}/"),
            {**other, "member": 202, "tenant_admin": 202, "platform_admin": 202},
        )


class TestBehaviour:
    def test_create_approve_and_events(self, world):
        member, admin = world.client("member"), world.client("platform_admin")
        created = member.post("/api/v1/deployments/", api_draft(world), format="json")
        assert created.status_code == 201
        body = created.json()
        assert body["state"] == "pending_approval" and body["gpus_needed"] == 2
        assert body["resource_name"] == f"llama-chat-{body['id']}"
        assert (body["serving_revision"], body["pending_revision"]) == (None, 1)
        approved = admin.post(
            f"/api/v1/deployments/{body['id']}/approve/", {"reason": "ok", "revision": 1}, format="json"
        )
        assert approved.json()["state"] == "approved" and approved.json()["reserved_gpus"] == 2
        assert (approved.json()["serving_revision"], approved.json()["pending_revision"]) == (1, None)
        again = admin.post(f"/api/v1/deployments/{body['id']}/approve/", {"revision": 1}, format="json")
        assert again.status_code == 409 and again.json()["code"] == "stale_revision"
        events = member.get(f"/api/v1/deployments/{body['id']}/events/").json()["results"]
        assert [e["reason"] for e in events] == ["Approved", "Requested"]
        assert events[0]["actor"] == "platform-admin"

    def test_filters_are_shared_with_the_ui(self, world, dep):
        client = world.client("platform_admin")
        assert client.get("/api/v1/deployments/?state=pending_approval&tenant=alpha").json()["count"] == 1
        assert client.get("/api/v1/deployments/?state=ready").json()["count"] == 0
        assert client.get("/api/v1/deployments/?flavor=a100-pcie").json()["count"] == 0
        assert client.get("/api/v1/deployments/?q=no-such-name").json()["count"] == 0
        assert client.get("/api/v1/deployments/?limit=5&unknown=1").json()["count"] == 1  # not a filter
        bad = client.get("/api/v1/deployments/?state=bogus")
        assert bad.status_code == 400 and "state" in bad.json()

    def test_preview_answers_quota_and_memory_fit_without_writing(self, world):
        client = world.client("member")
        body = client.post("/api/v1/deployments/preview/", api_draft(world, max_replicas=12), format="json").json()
        assert body["valid"] is True and body["quota"]["fit"] == "borrowing" and body["memory"]["verdict"] == "fits"
        body = client.post(
            "/api/v1/deployments/preview/", api_draft(world, model_source="deepseek-ai/DeepSeek-V3"), format="json"
        ).json()
        assert body["valid"] is False and body["memory"]["verdict"] == "does_not_fit"
        assert not ModelDeployment.objects.exists()

    @pytest.mark.parametrize(
        "field, value",
        [
            ("name", "has space"),
            ("name", "x" * 41),
            ("name", "ünï"),
            ("model_source", "org/model\nkind: Secret"),
            ("model_source", "x" * 600),
            ("tensor_parallel_size", 3),
            ("tensor_parallel_size", -1),
            ("max_replicas", 10**12),
            ("gpu_memory_utilization", 0.99),
            ("gpu_memory_utilization", "NaN"),
            ("flavor", "no-such-flavor"),
            ("quantization", "int3"),
            ("served_model_name", 'a"b'),
            ("hf_token_secret", "Secret\n"),
            ("max_model_len", 1),
        ],
    )
    def test_bad_input_is_400_with_the_field_and_nothing_written(self, world, field, value):
        response = world.client("member").post(
            "/api/v1/deployments/", api_draft(world, **{field: value}), format="json"
        )
        assert response.status_code == 400, response.content
        assert field in response.json()
        assert not ModelDeployment.objects.exists()

    def test_scaling_beyond_quota_is_refused_with_numbers(self, world, dep):
        admin = world.client("platform_admin")
        admin.post(f"/api/v1/deployments/{dep.pk}/approve/", {"revision": 1}, format="json")
        response = world.client("member").post(
            f"/api/v1/deployments/{dep.pk}/scale/", {"min_replicas": 1, "max_replicas": 13}, format="json"
        )
        assert response.status_code == 400 and "Does not fit" in str(response.json())

    def test_openapi_schema_documents_the_actions(self, world):
        schema = world.client("member").get("/api/schema/?format=json").json()
        paths = schema["paths"]
        for action in ("approve", "reject", "withdraw", "cancel", "stop", "start", "scale", "events", "metrics"):
            assert f"/api/v1/deployments/{{id}}/{action}/" in paths
        assert "/api/v1/deployments/preview/" in paths
        for suffix in (
            "",
            "diff/",
            "{number}/",
            *(f"{{number}}/{verb}/" for verb in ("approve", "reject", "withdraw", "rollback")),
        ):
            assert f"/api/v1/deployments/{{id}}/revisions/{suffix}" in paths
        approve = paths["/api/v1/deployments/{id}/approve/"]["post"]["requestBody"]["content"]["application/json"]
        body = schema["components"]["schemas"][approve["schema"]["$ref"].rsplit("/", 1)[1]]
        assert body["required"] == ["revision"] and "stale_revision" in body["properties"]["revision"]["description"]
        assert "generation" not in body["properties"]


class TestFastListRows:
    def test_the_list_page_equals_the_serializer_field_by_field(self, world):
        """The list endpoint builds rows directly (speed); they must equal the serializer's."""
        from deployments.api.serializers import DeploymentSerializer
        from deployments.models import ModelDeployment

        member, admin = world.client("member"), world.client("platform_admin")
        for i, extra in enumerate(
            [
                {},
                {"parameter_count_b": 7.5, "model_source": "acme/custom-7b"},
                {"max_model_len": None, "quantization": "fp8"},
            ]
        ):
            body = member.post(
                "/api/v1/deployments/", {**api_draft(world, name=f"row-{i}", max_replicas=1), **extra}, format="json"
            )
            assert body.status_code == 201, body.content
        dep = ModelDeployment.objects.get(name="row-0")
        admin.post(f"/api/v1/deployments/{dep.pk}/approve/", {"revision": 1}, format="json")
        services.deployment_update(deployment_id=dep.pk, user=world.users["member"], data={"max_model_len": 4096})
        ModelDeployment.objects.filter(pk=dep.pk).update(conditions=[{"type": "Ready", "status": "True"}])
        # The derived badge's other branches: a spec not yet converged, and scaled to zero.
        ModelDeployment.objects.filter(name="row-1").update(state="ready", generation=3, observed_generation=2)
        ModelDeployment.objects.filter(name="row-2").update(
            state="ready",
            observed_generation=F("generation"),
            conditions=[{"type": "Ready", "status": "True", "reason": "ScaledToZero"}],
        )
        listed = {row["id"]: row for row in member.get("/api/v1/deployments/").json()["results"]}
        assert {row["badge"] for row in listed.values()} >= {"updating", "scaled_to_zero"}
        assert (listed[dep.pk]["serving_revision"], listed[dep.pk]["pending_revision"]) == (1, 2)
        for dep in ModelDeployment.objects.select_related("tenant", "flavor", "created_by"):
            assert listed[dep.pk] == DeploymentSerializer(dep).data
