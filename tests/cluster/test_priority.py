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

Inside one ClusterQueue with nothing to borrow (`withinClusterQueue: LowerPriority`), a production
request takes the experiment's GPUs: the portal counts them as Kueue will (deployments.preemption:
the request is accepted, the experiment's reservation goes to it in the same transaction, so the
tenant never holds more than its quota), Kueue evicts the experiment and admits production.
What follows (production stops, Kueue admits the experiment again, it reserves its GPUs again) is
tests/deployments/test_preemption.py's, on observations: here it passed twice on a quiet machine
but timed out once in a clean-clone CI run (150 s, the experiment's RayService not Ready again), so
it is not part of this test until that is understood (issue 35's note).

World (tests/support/world.py): alpha 8 H100 nominal + 4 borrowing, beta 8 H100, one cohort.
"""

from __future__ import annotations

from deployments.choices import State
from deployments.reconcile import reconcile
from quotas.models import PriorityTier, TenantQuota
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


def test_production_preempts_an_experiment_in_the_same_queue_and_both_stories_are_told(world, kube):
    production = PriorityTier.objects.create(name="production", display_name="Production", value=1000)
    experiment = PriorityTier.objects.create(name="experiment", display_name="Experiment", value=10)
    world.alpha.allowed_tiers.set([production, experiment])
    TenantQuota.objects.filter(tenant=world.alpha).update(borrowing_limit_gpus=0)  # nothing to borrow
    onboard(kube, world.h100, gpu_nodes=2, gpus=8)
    exp = request_and_approve(world, flavor=world.h100, name="exp", tensor_parallel_size=4, priority_tier="experiment")
    converge(kube, exp, lambda d: d.state == State.READY, timeout=90, what="the experiment ready on 4")

    prod = request_and_approve(
        world, flavor=world.h100, name="prod", tensor_parallel_size=8, priority_tier="production"
    )  # 8 of a nominal 8 while the experiment holds 4: accepted, by preempting it

    exp.refresh_from_db()
    assert (prod.reserved_gpus, exp.reserved_gpus, exp.displaced) == (8, 0, True)
    quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
    assert quota.reserved_gpus == 8  # never 12, not even for a moment: one transaction
    (taken,) = exp.events.filter(reason="Preempting")
    assert taken.message.startswith("prod (tier production) needs GPUs of alpha's quota: its 4 GPU(s) went to it.")
    assert prod.events.filter(reason="Preempts", message__startswith="Takes 4 GPU(s) of exp").exists()

    def settled():
        for dep in (exp, prod):
            dep.refresh_from_db()
            reconcile(dep)
            dep.refresh_from_db()
        return prod.state == State.READY and exp.state == State.QUEUED

    kube.wait(settled, timeout=150, what="production ready, the experiment queued")
    (requeued,) = exp.events.filter(reason="Requeued")
    assert requeued.message.startswith("Preempted by a higher-priority workload in the same queue (Kueue: ")
    assert workload_of(kube, prod)["spec"]["priority"] == 1000
    assert (exp.reserved_gpus, exp.displaced) == (0, True)
