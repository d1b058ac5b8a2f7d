"""The Cluster page and GET /api/v1/cluster/sweep/ show the preemption every tenant ClusterQueue
gets (KUEUE_RECLAIM_WITHIN_COHORT, KUEUE_WITHIN_CLUSTER_QUEUE), each with the behaviour it implies
in the same words (runtime/preemption.py), and only to platform admins."""

from __future__ import annotations

import html
import re

import pytest

from runtime.preemption import RECLAIM_WITHIN_COHORT, WITHIN_CLUSTER_QUEUE


def shown_on_page(world) -> dict[str, str]:
    """Each preemption field's line on the Cluster page, as its text."""
    page = world.browser("platform_admin").get("/cluster/").content.decode()
    lines = re.findall(r'<li data-preemption="(\w+)">(.*?)</li>', page, re.S)
    return {field: html.unescape(re.sub(r"<[^>]+>", "", line)) for field, line in lines}


def test_with_the_defaults_the_page_says_what_the_clusterqueues_do(world) -> None:
    assert shown_on_page(world) == {
        "reclaimWithinCohort": (
            "reclaimWithinCohort Any: a tenant takes back its own nominal quota from borrowers in the cohort "
            "whatever their priority: a borrower's deployment is evicted and queues again "
            "(KUEUE_RECLAIM_WITHIN_COHORT)."
        ),
        "withinClusterQueue": (
            "withinClusterQueue LowerPriority: inside a tenant's queue a deployment of a higher priority tier "
            "may evict a lower-priority one to be admitted (KUEUE_WITHIN_CLUSTER_QUEUE)."
        ),
    }


@pytest.mark.parametrize(
    "reclaim, within",
    [("Never", "Never"), ("LowerPriority", "LowerOrNewerEqualPriority")],
)
def test_the_page_and_the_api_show_the_chosen_values_in_the_same_words(world, settings, reclaim, within) -> None:
    settings.KUEUE_RECLAIM_WITHIN_COHORT = reclaim
    settings.KUEUE_WITHIN_CLUSTER_QUEUE = within
    page = shown_on_page(world)
    body = world.client("platform_admin").get("/api/v1/cluster/sweep/").json()
    assert body["preemption"] == {
        "reclaimWithinCohort": {
            "value": reclaim,
            "setting": "KUEUE_RECLAIM_WITHIN_COHORT",
            "behaviour": RECLAIM_WITHIN_COHORT[reclaim],
        },
        "withinClusterQueue": {
            "value": within,
            "setting": "KUEUE_WITHIN_CLUSTER_QUEUE",
            "behaviour": WITHIN_CLUSTER_QUEUE[within],
        },
    }
    for field, shown in body["preemption"].items():
        assert page[field] == f"{field} {shown['value']}: {shown['behaviour']} ({shown['setting']})."
