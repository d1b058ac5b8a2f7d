"""runtime.status.stuck_eviction: when the portal finishes a Kueue eviction that cannot finish by
itself (the real-plane case is tests/cluster/test_walk.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runtime.status import (
    EVICTION_GRACE_SECONDS,
    WORKLOAD_GRACE_SECONDS,
    eviction_words,
    kueue_history,
    stuck_eviction,
    stuck_without_workload,
)

NOW = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)


def workload(*, evicted_ago: float | None, quota_reserved: bool) -> dict:
    conds = [{"type": "QuotaReserved", "status": "True" if quota_reserved else "False", "reason": "x"}]
    if evicted_ago is not None:
        at = (NOW - timedelta(seconds=evicted_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        conds.append(
            {
                "type": "Evicted",
                "status": "True",
                "reason": "Preempted",
                "message": "Preempted to accommodate a workload due to reclamation within the cohort",
                "lastTransitionTime": at,
            }
        )
    return {"status": {"conditions": conds}}


def admitted_condition(wl: dict) -> list[dict]:
    return [{"type": "Admitted", "status": "False", **kueue_history(wl)}]


def rayservice(suspend: bool | None) -> dict:
    config = {} if suspend is None else {"suspend": suspend}
    return {"spec": {"rayClusterConfig": config}}


def test_suspended_evicted_past_the_grace_and_still_reserving_quota_is_stuck():
    conds = admitted_condition(workload(evicted_ago=EVICTION_GRACE_SECONDS + 1, quota_reserved=True))
    assert "reclamation within the cohort" in stuck_eviction(rayservice(True), conds, NOW)


@pytest.mark.parametrize(
    "suspend, evicted_ago, quota_reserved",
    [
        (True, EVICTION_GRACE_SECONDS - 5, True),  # Kueue may still finish it
        (True, EVICTION_GRACE_SECONDS + 1, False),  # Kueue finished it: the Workload waits in the queue
        (False, EVICTION_GRACE_SECONDS + 1, True),  # not suspended yet: pods may still serve
        (None, EVICTION_GRACE_SECONDS + 1, True),
        (True, None, True),  # never evicted (a suspended new job waiting for admission)
    ],
)
def test_anything_else_is_left_to_kueue(suspend, evicted_ago, quota_reserved):
    conds = admitted_condition(workload(evicted_ago=evicted_ago, quota_reserved=quota_reserved))
    assert stuck_eviction(rayservice(suspend), conds, NOW) is None


def managed_rayservice(*, suspend: bool, age: float, queue: bool = True) -> dict:
    created = (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    labels = {"kueue.x-k8s.io/queue-name": "alpha"} if queue else {}
    return {
        "metadata": {"creationTimestamp": created, "labels": labels},
        "spec": {"rayClusterConfig": {"suspend": suspend}},
    }


NO_WORKLOAD = [{"type": "Admitted", "status": "False", "reason": "NoWorkload"}]


def test_suspended_with_no_workload_past_the_grace_is_stuck():
    assert stuck_without_workload(managed_rayservice(suspend=True, age=WORKLOAD_GRACE_SECONDS), NO_WORKLOAD, NOW)


@pytest.mark.parametrize(
    "obj, conditions",
    [
        (managed_rayservice(suspend=True, age=WORKLOAD_GRACE_SECONDS - 1), NO_WORKLOAD),  # Kueue may still make one
        (managed_rayservice(suspend=False, age=600), NO_WORKLOAD),  # running: not Kueue's to hold
        (managed_rayservice(suspend=True, age=600, queue=False), NO_WORKLOAD),  # not managed by Kueue
        (managed_rayservice(suspend=True, age=600), [{"type": "Admitted", "status": "False", "reason": "Pending"}]),
    ],
)
def test_otherwise_it_waits_for_kueue(obj, conditions):
    assert not stuck_without_workload(obj, conditions, NOW)


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("InClusterQueue", "Preempted by a higher-priority workload in the same queue (Kueue: "),
        ("InCohortReclamation", "Preempted by a cohort neighbour reclaiming its own quota (Kueue: "),
        ("Preempted", "Evicted by Kueue ("),  # the Evicted condition's own reason names no one
    ],
)
def test_an_eviction_says_who_preempted_it_where_kueue_says_so(reason, said):
    message = "Preempted to accommodate a workload (UID: u, JobUID: j) due to prioritization in the ClusterQueue"
    words = eviction_words({"type": "Preempted", "reason": reason, "message": message})
    assert words == said + message + ")"
