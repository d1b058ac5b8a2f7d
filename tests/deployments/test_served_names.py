"""Served model names are unique per tenant (issue 34: the tenant endpoint routes by the `model`
a client sends): refused on the field in the API and the form, on a change and at approval, free
again once deleted, free across tenants; the migration settles rows from before."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from deployments import services
from deployments.models import DeploymentEvent, ModelDeployment
from tests.deployments.test_picker import form_post
from tests.support.factories import api_draft, draft

D = "/api/v1/deployments"
TAKEN = (
    "chat already serves the model name 'llama3-8b' in alpha: clients pick a model by this name on the tenant's "
    "endpoint, so choose another."
)


def request(world, tenant="alpha", role="member", **fields):
    return world.client(role).post(f"{D}/", api_draft(world, tenant=tenant, **fields), format="json")


@pytest.fixture
def first(world) -> ModelDeployment:
    response = request(world, name="chat", served_model_name="llama3-8b")
    assert response.status_code == 201, response.content
    return ModelDeployment.objects.get(name="chat")


def test_a_second_deployment_serving_the_name_is_a_400_on_the_field(world, first):
    response = request(world, name="chat-two", served_model_name="llama3-8b")
    assert response.status_code == 400 and response.json() == {"served_model_name": [TAKEN], "code": "unique"}
    page = world.browser("member").post(
        "/deployments/new/",
        form_post(world, name="chat-two", model_source=first.model_source, served_model_name="llama3-8b"),
    )
    assert page.status_code == 200 and list(page.context["form"].errors["served_model_name"]) == [TAKEN]
    assert ModelDeployment.objects.count() == 1


def test_an_empty_served_name_is_the_name_and_counts_as_one(world, first):
    assert request(world, name="llama3-8b", served_model_name="").json()["served_model_name"] == [TAKEN]


def test_another_tenant_may_serve_the_same_name(world, first):
    response = request(world, tenant="beta", role="other_member", name="chat", served_model_name="llama3-8b")
    assert response.status_code == 201, response.content


def test_a_deleted_deployment_frees_it(world, first):
    assert world.client("member").delete(f"{D}/{first.pk}/").status_code in (202, 204)
    ModelDeployment.objects.filter(pk=first.pk).update(state="deleted")
    assert request(world, name="chat-two", served_model_name="llama3-8b").status_code == 201


def test_a_change_to_a_taken_name_is_refused_and_nothing_is_proposed(world, first):
    other = request(world, name="other", served_model_name="other").json()
    response = world.client("member").patch(f"{D}/{other['id']}/", {"served_model_name": "llama3-8b"}, format="json")
    assert response.status_code == 400 and response.json()["served_model_name"] == [
        TAKEN.replace("chat already", "chat already")
    ]
    assert ModelDeployment.objects.get(pk=other["id"]).revisions.count() == 1


def test_approval_refuses_a_name_taken_since_the_proposal(world, first):
    """Proposed while free; another deployment took the name before the decision."""
    member, admin = world.users["member"], world.users["platform_admin"]
    services.deployment_approve(deployment_id=first.pk, approver=admin, revision=1)
    ModelDeployment.objects.filter(pk=first.pk).update(state="ready")
    services.deployment_update(
        deployment_id=first.pk, user=member, data={"served_model_name": "shared-name", "max_model_len": 4096}
    )
    assert first.revisions.get(number=2).status == "proposed"
    services.deployment_create(
        tenant=world.alpha, user=member, data=draft(world, name="late", served_model_name="shared-name")
    )
    response = world.client("platform_admin").post(f"{D}/{first.pk}/approve/", {"revision": 2}, format="json")
    assert (
        response.status_code == 400
        and "late already serves the model name 'shared-name'" in response.json()["served_model_name"][0]
    )
    assert ModelDeployment.objects.get(pk=first.pk).served_model_name == "llama3-8b"


@pytest.mark.django_db(transaction=True)
def test_the_migration_settles_duplicates_from_before(tx_world):
    """Two of alpha's deployments served one name before 0014: the older keeps it, the newer is
    renamed and its timeline says so; an empty served name becomes the deployment's name."""
    world = tx_world
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    before = [n for n in latest if n[0] != "deployments"] + [("deployments", "0013_task")]
    try:
        executor.migrate(before)
        apps = executor.loader.project_state(before).apps
        deployment = apps.get_model("deployments", "ModelDeployment")
        common = dict(tenant_id=world.alpha.pk, flavor_id=world.h100.pk, model_source="acme/m", state="ready")
        old = deployment.objects.create(name="old", served_model_name="same", **common)
        new = deployment.objects.create(name="new", served_model_name="same", **common)
        blank = deployment.objects.create(name="blank", served_model_name="", **common)
        gone = deployment.objects.create(name="gone", served_model_name="same", **{**common, "state": "deleted"})
        # Someone already serves the name the newer one would get: it gets one more suffix.
        deployment.objects.create(name="taken", served_model_name=f"same-{new.pk}", **common)
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        names = dict(ModelDeployment.objects.values_list("name", "served_model_name"))
        renamed = f"same-{new.pk}-2"
        expected = {"old": "same", "new": renamed, "blank": "blank", "gone": "same", "taken": f"same-{new.pk}"}
        assert names == expected
        said = DeploymentEvent.objects.get(deployment_id=new.pk, reason="ServedNameChanged")
        assert said.type == "Warning" and f"'{renamed}'" in said.message
        assert not DeploymentEvent.objects.filter(deployment_id__in=[old.pk, blank.pk, gone.pk]).exists()
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
