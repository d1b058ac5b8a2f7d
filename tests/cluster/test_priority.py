"""Priority tiers on the real control plane (issue 35; Kueue 0.19.2, KubeRay 1.6.2, KWOK nodes):
the portal's WorkloadPriorityClasses are accepted by the API server (their CRD, CEL included), a
deployment's workload gets its tier's priority, and when Kueue must take GPUs back from a tenant
it takes them from the lower tier: alpha runs an experiment (4 GPUs, within its nominal 8) and a
production deployment (8, borrowing 4 of beta's idle quota); when beta asks for its own 8, Kueue
reclaims them from alpha (`reclaimWithinCohort: Any`) by evicting the experiment, not the
production deployment that was admitted after it (Kueue orders candidates by priority before
admission time: kubernetes-sigs/kueue v0.19.2, pkg/scheduler/preemption/preemption.go,
candidatesOrdering). The portal shows production and beta ready and the experiment back in the
queue, saying who preempted it.

What is not shown here: a production deployment preempting an experiment inside one ClusterQueue
with nothing to borrow. The portal's own reservation check refuses that request before Kueue
sees it (a tenant never reserves more GPUs than its nominal quota plus what the cohort can lend,
and a queued deployment keeps its reservation), so that case needs the reservation rule to count
a lower tier's GPUs as preemptible first (issue 35, left open).

World (tests/support/world.py): alpha 8 H100 nominal + 4 borrowing, beta 8 H100, one cohort.
"""

from __future__ import annotations

from deployments.choices import State
from deployments.reconcile import reconcile
from quotas.models import PriorityTier
from runtime import k8s
from tests.cluster.chain import converge, onboard, request_and_approve, workload_of


def test_kueue_reclaims_from_the_lower_tier_and_production_keeps_serving(world, kube):
    production = PriorityTier.objects.create(name="production", display_name="Production", value=1000)
    experiment = PriorityTier.objects.create(name="experiment", display_name="Experiment", value=10)
    world.alpha.allowed_tiers.set([production, experiment])
    onboard(kube, world.h100, gpu_nodes=3, gpus=8)  # sync_kueue applies the tiers' classes first
    assert kube.get(k8s.WORKLOADPRIORITYCLASS, "llm-portal-production")["value"] == 1000
    assert kube.get(k8s.WORKLOADPRIORITYCLASS, "llm-portal-experiment")["value"] == 10

    exp = request_and_approve(world, flavor=world.h100, name="exp", tensor_parallel_size=4, priority_tier="experiment")
    converge(kube, exp, lambda d: d.state == State.READY, timeout=90, what="the experiment ready on 4")
    prod = request_and_approve(
        world, flavor=world.h100, name="prod", tensor_parallel_size=8, priority_tier="production"
    )
    converge(kube, prod, lambda d: d.state == State.READY, timeout=90, what="production ready, borrowing 4")
    assert workload_of(kube, exp)["spec"]["priority"] == 10
    assert workload_of(kube, prod)["spec"]["priority"] == 1000

    neighbour = request_and_approve(world, world.beta, flavor=world.h100, name="neighbour", tensor_parallel_size=8)

    def settled():
        for dep in (exp, prod, neighbour):
            dep.refresh_from_db()
            reconcile(dep)
            dep.refresh_from_db()
        return neighbour.state == State.READY and exp.state == State.QUEUED

    kube.wait(settled, timeout=150, what="beta ready, alpha's experiment queued")
    (requeued,) = exp.events.filter(reason="Requeued")
    assert requeued.message.startswith("Preempted by a cohort neighbour reclaiming its own quota (Kueue: ")
    assert not prod.events.filter(reason="Requeued").exists()
    assert prod.state == State.READY  # the higher tier kept its GPUs
