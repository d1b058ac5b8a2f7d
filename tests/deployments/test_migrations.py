"""The upgrade to revisions (deployments 0006 + 0007) on a database filled with the rows of the
model before it, every state included: nothing is lost, every deployment gets its revisions, a
pending edit of an approved deployment becomes serving revision 1 + proposed revision 2, and
reservations the new GPU rule does not hold are released. The upgraded schema is the one a fresh
migrate gives.

The test migrates the test database itself (real commits), and always migrates it back to the
latest state so that the tests after it run on the schema they expect.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from core.models import AuditEvent
from deployments.choices import RevisionStatus as R
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.services.common import spec_of
from quotas.models import QuotaReservation, TenantQuota

pytestmark = pytest.mark.django_db(transaction=True)

OLD = ("deployments", "0005_modeldeployment_serving_profile")  # the last migration before revisions

# name → (old state, GPUs the old row held). Every deployment asks for 1 GPU (1 replica × TP 1).
OLD_ROWS = {
    "fresh": ("pending_approval", 0),
    "approved": ("approved", 1),
    "queued": ("queued", 1),
    "provisioning": ("provisioning", 1),
    "ready": ("ready", 1),
    "degraded": ("degraded", 1),
    "failed": ("failed", 1),
    "stopped": ("stopped", 1),
    "stopped-released": ("stopped", 0),
    "deleting": ("deleting", 1),
    "deleted": ("deleted", 0),
    "deleted-request": ("deleted", 0),  # deleted while it waited for its first decision
    "rejected": ("rejected", 0),
    "cancelled": ("cancelled", 0),
}
# name → (state it was in when the edit sent it to pending approval, GPUs held)
EDITED = {"edited": ("ready", 1), "edited-stopped": ("stopped", 0)}
RELEASED = {"failed", "stopped", "deleting"}
EXPECTED_REVISIONS = {
    "fresh": {1: R.PROPOSED},
    "rejected": {1: R.REJECTED},
    "cancelled": {1: R.WITHDRAWN},
    "deleted-request": {1: R.WITHDRAWN},
    "edited": {1: R.APPROVED, 2: R.PROPOSED},
    "edited-stopped": {1: R.APPROVED, 2: R.PROPOSED},
}


def latest(executor: MigrationExecutor) -> list[tuple[str, str]]:
    return executor.loader.graph.leaf_nodes()


def before(executor: MigrationExecutor) -> list[tuple[str, str]]:
    """Every app at its latest migration but deployments, at OLD (nothing else depends on 0006+)."""
    return [node for node in latest(executor) if node[0] != OLD[0]] + [OLD]


def downgrade(executor: MigrationExecutor):
    """Migrate back to OLD; the historical models (apps) of that state."""
    targets = before(executor)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def upgrade(executor: MigrationExecutor) -> None:
    executor.loader.build_graph()
    executor.migrate(latest(executor))


def schema() -> dict:
    """Every table's columns and constraints, as PostgreSQL describes them."""
    introspection = connection.introspection
    with connection.cursor() as cursor:
        return {
            table: (
                [tuple(column) for column in introspection.get_table_description(cursor, table)],
                {
                    name: (tuple(c["columns"]), c["unique"], c["primary_key"], c["foreign_key"], c["check"], c["index"])
                    for name, c in introspection.get_constraints(cursor, table).items()
                },
            )
            for table in sorted(introspection.table_names(cursor))
        }


@pytest.fixture
def executor(tx_world):
    """A migration executor on the test database; back to the latest state afterwards."""
    yield MigrationExecutor(connection)
    back = MigrationExecutor(connection)
    back.migrate(latest(back))


def fill_old_rows(apps, world) -> dict[str, int]:
    """Today's (0005) rows in every state, with the events and audit entries the old services wrote."""
    deployment = apps.get_model("deployments", "ModelDeployment")
    event = apps.get_model("deployments", "DeploymentEvent")
    audit = apps.get_model("core", "AuditEvent")
    reservation = apps.get_model("quotas", "QuotaReservation")
    quota = apps.get_model("quotas", "TenantQuota")
    member, admin = world.users["member"], world.users["platform_admin"]
    h100 = quota.objects.get(tenant_id=world.alpha.pk, flavor_id=world.h100.pk)
    spec = dict(
        model_source="meta-llama/Meta-Llama-3-8B-Instruct",
        tensor_parallel_size=1,
        min_replicas=1,
        max_replicas=1,
        max_model_len=8192,
        dtype="bfloat16",
    )

    def row(name: str, state: str, held: int, **changes) -> int:
        never = state in ("pending_approval", "rejected", "cancelled")
        fields = spec | {"served_model_name": name, "flavor_id": world.h100.pk}
        fields |= {"approved_by_id": None if never else admin.pk, "observed_generation": 0 if never else 1}
        dep = deployment.objects.create(
            tenant_id=world.alpha.pk,
            name=name,
            state=state,
            reserved_gpus=held,
            created_by_id=member.pk,
            **fields | changes,
        )
        event.objects.create(deployment_id=dep.pk, reason="Requested", to_state="pending_approval")
        if not never and name != "deleted-request":
            event.objects.create(
                deployment_id=dep.pk, reason="Approved", from_state="pending_approval", to_state="approved"
            )
        if held:
            reservation.objects.create(quota_id=h100.pk, owner_type="deployment", owner_id=dep.pk, gpus=held)
            h100.reserved_gpus += held
        return dep.pk

    ids = {name: row(name, state, held) for name, (state, held) in OLD_ROWS.items()}
    # The tenant's policy approved "queued": the row names no approver, the audit log says "policy".
    deployment.objects.filter(pk=ids["queued"]).update(approved_by_id=None)
    audit.objects.create(
        action="deployment.approve",
        actor_name="policy",
        object_type="deployments.modeldeployment",
        object_id=str(ids["queued"]),
        changes={"reserved_gpus": 1, "generation": 1},
    )
    for name, (was, held) in EDITED.items():
        # Requested, edited while pending (generation 2), approved at generation 2, then scaled
        # (generation 3) and edited (generation 4): the old services moved it to pending approval
        # with the row holding the edit and the reservation of what ran.
        ids[name] = pk = row(
            name,
            "pending_approval",
            held,
            generation=4,
            observed_generation=2,
            approved_by_id=admin.pk,
            served_model_name=f"{name}-renamed",
            max_replicas=2,
            max_model_len=None,
            enable_chunked_prefill=False,
            gpu_memory_utilization=0.85,
            flavor_id=world.a100.pk,
        )
        entry = dict(object_type="deployments.modeldeployment", object_id=str(pk), tenant_id=world.alpha.pk)
        before_approval = {"served_model_name": name}
        audit.objects.create(
            action="deployment.update",
            actor_name="alpha-member",
            changes={"before": before_approval, "after": {"served_model_name": f"{name}-renamed"}, "generation": 2},
            **entry,
        )
        audit.objects.create(
            action="deployment.approve",
            actor_name="platform-admin",
            changes={"reserved_gpus": 1, "generation": 2},
            **entry,
        )
        event.objects.create(deployment_id=pk, reason="Approved", from_state="pending_approval", to_state="approved")
        event.objects.create(deployment_id=pk, reason="Ready", from_state="approved", to_state="ready")
        audit.objects.create(
            action="deployment.scale",
            actor_name="alpha-member",
            changes={"before": {"max_replicas": "1"}, "after": {"max_replicas": "2"}, "generation": 3},
            **entry,
        )
        event.objects.create(deployment_id=pk, reason="ApprovalRequired", from_state=was, to_state="pending_approval")
        before = {
            "max_model_len": "8192",
            "enable_chunked_prefill": "True",
            "gpu_memory_utilization": "0.9",
            "flavor": "H100 SXM5 (h100-sxm5)",  # str(GpuFlavor), as the old services wrote it
        }
        audit.objects.create(
            action="deployment.update",
            actor_name="alpha-member",
            changes={"before": before, "after": {}, "generation": 4},
            **entry,
        )
    h100.save()
    return ids


def test_the_upgrade_keeps_every_row_and_turns_it_into_revisions(executor, tx_world):
    world = tx_world
    ids = fill_old_rows(downgrade(executor), world)
    old_events = DeploymentEvent.objects.order_by("id")
    events = {pk: list(old_events.filter(deployment_id=pk).values_list("id", "reason")) for pk in ids.values()}
    audits = AuditEvent.objects.count()

    upgrade(executor)

    assert ModelDeployment.objects.count() == len(ids)
    for name, pk in ids.items():
        dep = ModelDeployment.objects.get(pk=pk)
        assert list(dep.events.order_by("id").values_list("id", "reason")) == events[pk], name
        revisions = dict(dep.revisions.order_by("number").values_list("number", "status"))
        assert revisions == EXPECTED_REVISIONS.get(name, {1: R.APPROVED}), name
        if revisions[1] == R.APPROVED:
            assert dep.serving_revision.number == 1, name
        assert spec_of(dep) == dep.revisions.get(number=1).spec, name  # the row serves revision 1
    assert AuditEvent.objects.count() == audits
    deciders = {
        name: ModelDeployment.objects.get(pk=ids[name]).serving_revision.decider for name in ("queued", "ready")
    }
    assert deciders == {"queued": "policy", "ready": "platform-admin"}

    states = dict(ModelDeployment.objects.values_list("name", "state"))
    assert states == {name: state for name, (state, _) in OLD_ROWS.items()} | {
        name: was for name, (was, _) in EDITED.items()
    }


def test_a_pending_edit_becomes_the_serving_revision_and_a_proposal(executor, tx_world):
    world = tx_world
    ids = fill_old_rows(downgrade(executor), world)
    upgrade(executor)

    dep = ModelDeployment.objects.get(pk=ids["edited"])
    serving, proposed = dep.revisions.get(number=1), dep.revisions.get(number=2)
    # What ran: the edits since the approval undone; the rename before it stays.
    assert (serving.spec["max_model_len"], serving.spec["enable_chunked_prefill"]) == (8192, True)
    assert (serving.spec["gpu_memory_utilization"], serving.spec["flavor"]) == (0.9, world.h100.pk)
    assert (serving.spec["max_replicas"], serving.spec["served_model_name"], serving.gpus) == (1, "edited-renamed", 1)
    # What waits: the row as the old model left it.
    assert (proposed.spec["max_model_len"], proposed.spec["enable_chunked_prefill"]) == (None, False)
    assert (proposed.spec["gpu_memory_utilization"], proposed.spec["flavor"]) == (0.85, world.a100.pk)
    assert (proposed.spec["max_replicas"], proposed.gpus) == (2, 2)
    # The row is back in its running state, serving revision 1 on the reservation it held.
    assert (dep.state, dep.flavor_id, dep.max_model_len, dep.reserved_gpus) == ("ready", world.h100.pk, 8192, 1)
    assert dep.serving_revision_id == serving.pk and dep.proposed_number == 2


def test_reservations_the_new_rule_does_not_hold_are_released(executor, tx_world):
    world = tx_world
    ids = fill_old_rows(downgrade(executor), world)
    held_before = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100).reserved_gpus
    upgrade(executor)

    quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
    active = QuotaReservation.objects.filter(quota=quota, released__isnull=True)
    assert quota.reserved_gpus == held_before - len(RELEASED) == sum(active.values_list("gpus", flat=True))
    for name in RELEASED:
        assert ModelDeployment.objects.get(pk=ids[name]).reserved_gpus == 0, name
        assert not active.filter(owner_id=ids[name]).exists(), name
    running = ("approved", "queued", "provisioning", "ready", "degraded", "edited")
    assert sorted(active.values_list("owner_id", flat=True)) == sorted(ids[name] for name in running)


def test_upgrading_again_is_a_no_op_and_gives_the_fresh_schema(executor, tx_world):
    world = tx_world
    fresh = schema()
    fill_old_rows(downgrade(executor), world)
    upgrade(executor)
    revisions = sorted(ModelDeployment.objects.values_list("pk", "revisions__number", "revisions__status"))

    executor.loader.build_graph()
    assert executor.migration_plan(latest(executor)) == []
    call_command("migrate", verbosity=0)
    assert sorted(ModelDeployment.objects.values_list("pk", "revisions__number", "revisions__status")) == revisions
    assert schema() == fresh
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)  # SystemExit(1) if models ≠ migrations
