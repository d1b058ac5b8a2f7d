"""Kueue preemption in every tenant ClusterQueue: the values the platform may choose and, in words,
what each lets happen. The one place for both: portal/settings.py takes its allowed values from here,
`runtime.manifests.kueue.render_cluster_queue` renders what `PlatformSpec` holds, and the Cluster page
and `GET /api/v1/cluster/sweep/` show `preemption_settings()`.

As read in kubernetes-sigs/kueue v0.19.2 (Classic Preemption, Kueue's default; the portal turns no
fair sharing on, which would change what the cohort setting means):

- apis/kueue/v1beta2/clusterqueue_types.go, `ClusterQueuePreemption`: the values and their meaning
  (the CRD in ../shared/schemas/crds has the same enums).
- pkg/scheduler/preemption/classical/hierarchical_preemption.go: `withinClusterQueue` decides over
  the admitted workloads of the same ClusterQueue (`collectSameQueueCandidates`);
  `reclaimWithinCohort` over those of the other ClusterQueues of the cohort that use more than
  their nominal quota of what is needed (`collectCandidatesInSubtree`), and only for a ClusterQueue
  that has a cohort (`collectCandidatesForHierarchicalReclaim`). Kueue reclaims only for a workload
  that fits its own ClusterQueue's nominal quota (borrowWithinCohort, which would widen that, is
  never set by the portal).
- pkg/scheduler/preemption/common/preemption_policy.go, `SatisfiesPreemptionPolicy`: LowerPriority
  is a strictly lower priority; LowerOrNewerEqualPriority adds an equal priority with a later queue
  timestamp (the Workload's creation: pkg/workload/workload.go, `GetQueueOrderTimestamp`); Any is
  every workload.

The CRD's one rule between these fields, "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"
(CEL on ClusterQueuePreemption, and the same check in pkg/webhooks/clusterqueue_webhook.go), is about
borrowWithinCohort, which the portal never renders (its default policy is Never): every pair of the
two settings below is a ClusterQueue Kueue accepts (tests/runtime/test_preemption.py checks all nine).
"""

from __future__ import annotations

from typing import Any

from runtime.spec import PlatformSpec

# reclaimWithinCohort: a tenant's deployment fits its own nominal quota, but other tenants of the
# cohort borrow that quota.
RECLAIM_WITHIN_COHORT: dict[str, str] = {
    "Never": (
        "a tenant does not take its nominal quota back from borrowers in the cohort: its deployment "
        "waits until the borrowers free it (their deployments stop or shrink)"
    ),
    "LowerPriority": (
        "a tenant takes its own nominal quota back from borrowers in the cohort only by evicting "
        "deployments of a lower priority tier than the one waiting; borrowers of the same or a higher "
        "tier keep running and it waits"
    ),
    "Any": (
        "a tenant takes back its own nominal quota from borrowers in the cohort whatever their priority: "
        "a borrower's deployment is evicted and queues again"
    ),
}

# withinClusterQueue: a tenant's deployment does not fit what is free of its own quota.
WITHIN_CLUSTER_QUEUE: dict[str, str] = {
    "Never": (
        "inside a tenant's queue no deployment evicts another: one that does not fit waits for quota "
        "to free, whatever its priority tier"
    ),
    "LowerPriority": (
        "inside a tenant's queue a deployment of a higher priority tier may evict a lower-priority one to be admitted"
    ),
    "LowerOrNewerEqualPriority": (
        "inside a tenant's queue a deployment may evict one of a lower priority tier, or one of the same "
        "tier that was queued after it, to be admitted"
    ),
}

# Kueue field -> (the setting that chooses it, its values and their words).
SETTINGS: dict[str, tuple[str, dict[str, str]]] = {
    "reclaimWithinCohort": ("KUEUE_RECLAIM_WITHIN_COHORT", RECLAIM_WITHIN_COHORT),
    "withinClusterQueue": ("KUEUE_WITHIN_CLUSTER_QUEUE", WITHIN_CLUSTER_QUEUE),
}


def preemption_settings(platform: PlatformSpec) -> dict[str, dict[str, Any]]:
    """The preemption every tenant ClusterQueue gets, per Kueue field: the value, the setting that
    chose it and the behaviour it implies, as the Cluster page and its API show them."""
    values = {
        "reclaimWithinCohort": platform.reclaim_within_cohort,
        "withinClusterQueue": platform.within_cluster_queue,
    }
    return {
        field: {"value": values[field], "setting": setting, "behaviour": words[values[field]]}
        for field, (setting, words) in SETTINGS.items()
    }
