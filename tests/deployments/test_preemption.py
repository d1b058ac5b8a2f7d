"""Preemption inside one tenant's queue, as the portal counts it (deployments.preemption): which
lower tiers Kueue would evict for a higher one, that their GPUs go to it in one transaction (the
tenant never holds more than its quota), what each side's timeline says, and how a displaced
deployment takes its GPUs again when Kueue admits it again. The same scene on the real Kueue
controller is tests/cluster/test_priority.py.

World: alpha has 8 H100 nominal; borrowing is turned off here (nothing to borrow from the cohort).
"""

from __future__ import annotations

import pytest

from core.exceptions import QuotaExceeded
from deployments import services
from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.preemption import PREEMPTING, READMITTED_OVER, victims
from deployments.validation import check_draft
from quotas.models import PriorityTier, TenantQuota
from tests.support.factories import draft

pytestmark = pytest.mark.django_db


@pytest.fixture
def tiers(world):
    made = {
        name: PriorityTier.objects.create(name=name, display_name=name.title(), value=value)
        for name, value in (("production", 1000), ("standard", 100), ("experiment", 10))
    }
    world.alpha.allowed_tiers.set(made.values())
    TenantQuota.objects.filter(tenant=world.alpha).update(borrowing_limit_gpus=0)
    return made


def running(world, name: str, gpus: int, tier: str = "", state: str = State.READY) -> ModelDeployment:
    dep = services.deployment_create(
        tenant=world.alpha,
        user=world.users["member"],
        data=draft(world, name=name, served_model_name=name, tensor_parallel_size=gpus, priority_tier=tier, **ONE),
    )
    services.deployment_approve(deployment_id=dep.pk, revision=1, approver=world.users["platform_admin"])
    if state != State.APPROVED:
        services.deployment_observe(deployment_id=dep.pk, generation=1, state=state, conditions=[])
    return ModelDeployment.objects.get(pk=dep.pk)


ONE = {"min_replicas": 1, "max_replicas": 1}


def reserved(world) -> int:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100).reserved_gpus


def test_production_takes_the_experiments_gpus_in_one_transaction(world, tiers):
    exp = running(world, "exp", 4, "experiment")
    std = running(world, "std", 2, "standard")

    prod = running(world, "prod", 4, "production", state=State.APPROVED)  # 2 free: 2 more are needed

    exp.refresh_from_db()
    std.refresh_from_db()
    assert (exp.displaced, exp.reserved_gpus, exp.state) == (True, 0, State.READY)  # serves until Kueue evicts
    assert (std.displaced, std.reserved_gpus) == (False, 2)  # the lowest tier goes first, and only what is needed
    assert (prod.reserved_gpus, reserved(world)) == (4, 6)
    assert exp.events.get(reason=PREEMPTING).message.startswith("prod (tier production) needs GPUs of alpha's quota")


def test_the_newest_of_one_tier_goes_first_and_borrowing_or_equal_tiers_never_count(world, tiers, settings):
    older = running(world, "older", 2, "experiment")
    newer = running(world, "newer", 2, "experiment")
    running(world, "peer", 4, "production")
    assert [d.name for d in victims(tenant=world.alpha, flavor=world.h100, gpus=2, tier="production")] == ["newer"]
    assert victims(tenant=world.alpha, flavor=world.h100, gpus=2, tier="experiment") == []  # equal: never
    assert victims(tenant=world.alpha, flavor=world.h100, gpus=2, tier="") == []  # no tier: priority 0
    assert victims(tenant=world.alpha, flavor=world.h100, gpus=6, tier="production") == []  # not even all make room
    settings.KUEUE_WITHIN_CLUSTER_QUEUE = "Never"
    assert victims(tenant=world.alpha, flavor=world.h100, gpus=2, tier="production") == []
    assert {older.pk, newer.pk} <= set(ModelDeployment.objects.values_list("pk", flat=True))


def test_without_room_even_by_preemption_the_approval_is_refused_and_nothing_changes(world, tiers):
    exp = running(world, "exp", 4, "experiment")
    running(world, "peer", 4, "production")
    big = services.deployment_create(  # passes the request check: exp's 4 GPUs would make room
        tenant=world.alpha,
        user=world.users["member"],
        data=draft(world, name="big", served_model_name="big", tensor_parallel_size=4, priority_tier="standard", **ONE),
    )
    running(world, "p2", 4, "production")  # approved first: it took exp's GPUs
    exp.refresh_from_db()
    assert (exp.displaced, exp.reserved_gpus, reserved(world)) == (True, 0, 8)

    with pytest.raises(QuotaExceeded):
        services.deployment_approve(deployment_id=big.pk, revision=1, approver=world.users["platform_admin"])

    big.refresh_from_db()
    assert (big.state, big.reserved_gpus, reserved(world)) == (State.PENDING_APPROVAL, 0, 8)
    assert ModelDeployment.objects.filter(displaced=True).count() == 1  # nobody else was displaced for it


def test_the_request_check_says_whom_it_preempts_instead_of_refusing(world, tiers):
    running(world, "exp", 4, "experiment")
    running(world, "std", 4, "standard")
    data = draft(world, name="prod", tensor_parallel_size=4, priority_tier="production", **ONE)
    check = check_draft(data, tenant=world.alpha)
    assert not check.errors
    assert any(w.startswith("Fits by preempting exp (experiment, 4 GPUs)") for w in check.warnings)
    refused = check_draft(
        draft(world, name="none", tensor_parallel_size=4, priority_tier="", **ONE), tenant=world.alpha
    )
    assert "max_replicas" in refused.errors


def test_a_tier_upgrade_never_counts_the_deployment_as_its_own_victim(world, tiers):
    exp = running(world, "exp", 4, "experiment")
    running(world, "std", 4, "standard")
    data = draft(world, name="exp", tensor_parallel_size=8, priority_tier="production", **ONE)
    check = check_draft(data, tenant=world.alpha, credit_gpus=exp.reserved_gpus, exclude=exp.pk)
    assert not check.errors
    assert [w for w in check.warnings if w.startswith("Fits by preempting")] == [
        "Fits by preempting std (standard, 4 GPUs): Kueue evicts the lower priority tier in the tenant's queue, "
        "which waits there until GPUs are free again."
    ]  # its own 4 are credited, not counted again as a victim's


def test_a_displaced_deployment_reserves_again_when_kueue_admits_it_again(world, tiers):
    exp = running(world, "exp", 4, "experiment")
    running(world, "std", 2, "standard")
    prod = running(world, "prod", 4, "production")
    services.deployment_observe(deployment_id=exp.pk, generation=1, state=State.QUEUED, conditions=[])  # evicted
    exp.refresh_from_db()
    assert (exp.state, exp.reserved_gpus, exp.displaced) == (State.QUEUED, 0, True)

    services.deployment_stop(deployment_id=prod.pk, user=world.users["member"])
    services.deployment_observe(deployment_id=exp.pk, generation=1, state=State.PROVISIONING, conditions=[])

    exp.refresh_from_db()
    assert (exp.state, exp.reserved_gpus, exp.displaced, reserved(world)) == (State.PROVISIONING, 4, False, 6)


def test_admitted_again_without_room_in_the_books_says_so_once_and_holds_nothing(world, tiers):
    exp = running(world, "exp", 4, "experiment")
    running(world, "prod", 8, "production")
    services.deployment_observe(deployment_id=exp.pk, generation=1, state=State.QUEUED, conditions=[])
    for state in (State.PROVISIONING, State.QUEUED, State.READY):  # Kueue's view and the books disagree
        services.deployment_observe(deployment_id=exp.pk, generation=1, state=state, conditions=[])
    exp.refresh_from_db()
    assert (exp.state, exp.reserved_gpus, exp.displaced, reserved(world)) == (State.READY, 0, True, 8)
    assert exp.events.filter(reason=READMITTED_OVER).count() == 1


def test_a_displaced_deployment_stopped_and_started_again_is_an_ordinary_start(world, tiers):
    exp = running(world, "exp", 4, "experiment")
    prod = running(world, "prod", 8, "production")
    services.deployment_stop(deployment_id=exp.pk, user=world.users["member"])
    exp.refresh_from_db()
    assert (exp.displaced, exp.reserved_gpus) == (False, 0)
    with pytest.raises(QuotaExceeded):  # an experiment never takes production's GPUs
        services.deployment_start(deployment_id=exp.pk, user=world.users["member"])
    services.deployment_stop(deployment_id=prod.pk, user=world.users["member"])
    services.deployment_start(deployment_id=exp.pk, user=world.users["member"])
    exp.refresh_from_db()
    assert (exp.state, exp.reserved_gpus, exp.displaced) == (State.APPROVED, 4, False)


def test_what_fits_by_borrowing_borrows_and_evicts_nobody(world, tiers):
    TenantQuota.objects.filter(tenant=world.alpha).update(borrowing_limit_gpus=4)  # beta's 8 idle
    exp = running(world, "exp", 4, "experiment")
    running(world, "std", 4, "standard")
    assert victims(tenant=world.alpha, flavor=world.h100, gpus=4, tier="production") == []

    prod = running(world, "prod", 4, "production", state=State.APPROVED)

    exp.refresh_from_db()
    assert (exp.displaced, exp.reserved_gpus, prod.reserved_gpus, reserved(world)) == (False, 4, 4, 12)
