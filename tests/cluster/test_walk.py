"""Issue 41's walk on the real control plane (Kueue 0.19.2, KubeRay 1.6.2, KWOK nodes): a second
flavor, a request over quota, a neighbour that takes the GPUs a deleted deployment frees, and a
cohort neighbour reclaiming its nominal quota from a borrower. At every step the state the portal
shows is the cluster's (tests/cluster/test_replica_edit.py and test_readiness.py walk the replica
edit and a Kueue restart).

World (tests/support/world.py): alpha 8 H100 nominal + 4 borrowing and 4 A100; beta 8 H100; both
ClusterQueues in the cohort `llm-serving` with `reclaimWithinCohort: Any`
(runtime/manifests/kueue.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from deployments import services
from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.reconcile import reconcile
from deployments.specs import deployment_spec
from deployments.sweep import last_orphans, orphan_delete, sweep
from runtime import k8s
from runtime.backends import get_backend
from tests.cluster.chain import condition, converge, onboard, request_and_approve, workload_of


def pods_of(kube, dep: ModelDeployment) -> list[dict]:
    return [
        p
        for p in kube.pods(dep.tenant.namespace)
        if p["metadata"]["labels"].get("ray.io/cluster", "").startswith(f"{dep.resource_name}-")
    ]


def gpu_pods(kube, dep) -> list[dict]:
    return [
        p
        for p in pods_of(kube, dep)
        if any("nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {}) for c in p["spec"]["containers"])
    ]


def node_flavor(kube, pod: dict) -> str:
    return kube.raw(f"/api/v1/nodes/{pod['spec']['nodeName']}")["metadata"]["labels"]["llm-portal.io/flavor"]


def test_each_flavor_runs_on_its_own_nodes_and_a_request_over_quota_is_refused_before_the_cluster(
    world, kube, settings
):
    """The two flavors name their nodes by different label keys (issue 38: Kueue >= 0.18.2 matches
    a pod's nodeSelector only against the keys of the flavor it tries, so pods pinned by a flavor's
    own labels were admitted on the other flavor and stayed Pending). The portal pins every pod by
    its own key, llm-portal.io/flavor, present on every flavor and node."""
    world.a100.node_labels = {"cloud.example.com/gpu": "a100"}
    world.a100.save()
    onboard(kube, world.h100, world.a100, gpus=4)
    h100 = request_and_approve(world, flavor=world.h100, name="chat-h")
    a100 = request_and_approve(world, flavor=world.a100, name="chat-a")
    for dep in (h100, a100):
        converge(kube, dep, lambda d: d.state == State.READY, what="ready")
        (worker,) = gpu_pods(kube, dep)
        assert node_flavor(kube, worker) == dep.flavor.name
        assignments = workload_of(kube, dep)["status"]["admission"]["podSetAssignments"]
        gpu_flavors = {a["flavors"].get("nvidia.com/gpu") for a in assignments} - {None}
        assert gpu_flavors == {dep.flavor.name}, assignments

    # alpha has 4 A100 in all, one in use: a 4-GPU request is a 400 on the form, nothing is sent.
    with pytest.raises(services.DraftInvalid) as refused:
        services.deployment_create(
            tenant=world.alpha,
            user=world.users["member"],
            data={**_draft(world), "name": "too-big", "flavor": world.a100, "tensor_parallel_size": 4},
        )
    assert set(refused.value.errors) == {"max_replicas"} or "quota" in str(refused.value.errors).lower()
    assert not ModelDeployment.objects.filter(name="too-big").exists()
    names = {w["metadata"]["name"] for w in kube.list(k8s.WORKLOAD, world.alpha.namespace)}
    assert not any("too-big" in n for n in names)

    # KServe enabled but not installed (issue 41: the sweep crashed every 30 s): it is skipped and
    # said so, the rest of the sweep runs, and two settled deployments need nothing.
    settings.RUNTIME_BACKENDS = ["kuberay", "kserve"]
    report = sweep()
    assert (report["not_installed"], report["errors"], report["enqueued"]) == (["kserve"], [], 0), report
    assert report["checked"] == 2


def _draft(world):
    from tests.support.factories import draft

    return draft(world, min_replicas=1, max_replicas=1)


def test_a_neighbour_waits_admitted_but_pending_then_takes_the_gpu_a_deleted_deployment_frees(world, kube):
    """One H100 GPU on the only node: Kueue admits beta by quota, the scheduler cannot place its
    worker. The portal says provisioning with the scheduler's reason (not ready); deleting alpha's
    deployment removes its RayService, Workload and pods (owner references, the real garbage
    collector) and releases its reservation, and beta's worker then runs."""
    onboard(kube, world.h100, gpus=1)
    first = request_and_approve(world, flavor=world.h100, name="first")
    converge(kube, first, lambda d: d.state == State.READY, what="ready")
    second = request_and_approve(world, world.beta, flavor=world.h100, name="second")

    def waits_on_the_scheduler(d):
        return d.state == State.PROVISIONING and "Insufficient nvidia.com/gpu" in d.status_message

    converge(kube, second, waits_on_the_scheduler, timeout=60, what="provisioning: Insufficient nvidia.com/gpu")
    assert condition(workload_of(kube, second), "Admitted").get("status") == "True"

    services.deployment_delete(deployment_id=first.pk, user=world.users["member"])
    first.refresh_from_db()
    assert first.reserved_gpus == 0
    converge(kube, first, lambda d: d.state == State.DELETED, timeout=60, what="deleted")
    kube.wait(lambda: not pods_of(kube, first), timeout=60, what="the first deployment's pods collected")
    assert kube.get(k8s.RAYSERVICE, first.resource_name, first.tenant.namespace) is None
    kube.wait(lambda: workload_of(kube, first) is None, timeout=30, what="its Workload collected")

    converge(kube, second, lambda d: d.state == State.READY, timeout=90, what="ready on the freed GPU")
    (worker,) = gpu_pods(kube, second)
    assert worker["status"]["phase"] == "Running"


def test_a_cohort_neighbour_reclaims_its_quota_and_the_borrower_shows_queued(world, kube):
    """alpha borrows 4 of beta's unused H100 (8 nominal + 4); beta then asks for its own 8: Kueue
    preempts alpha's borrowing Workload (reclaimWithinCohort). On Kueue 0.19.2 with KubeRay 1.6.2
    that eviction never finishes by itself (runtime/status.py `stuck_eviction`): the portal
    replaces the suspended RayService, so beta is admitted and runs, and alpha's borrower shows
    queued with Kueue's reason, never ready; alpha's nominal deployment is untouched."""
    onboard(kube, world.h100, gpu_nodes=3, gpus=8)
    own = request_and_approve(world, flavor=world.h100, name="own", tensor_parallel_size=8)
    converge(kube, own, lambda d: d.state == State.READY, timeout=90, what="ready on alpha's nominal 8")
    borrower = request_and_approve(world, flavor=world.h100, name="borrower", tensor_parallel_size=4)
    converge(kube, borrower, lambda d: d.state == State.READY, timeout=90, what="ready on 4 borrowed")
    first_uid = kube.get(k8s.RAYSERVICE, borrower.resource_name, world.alpha.namespace)["metadata"]["uid"]

    neighbour = request_and_approve(world, world.beta, flavor=world.h100, name="neighbour", tensor_parallel_size=8)

    def both_settled(_):
        for dep in (borrower, neighbour):
            dep.refresh_from_db()
            reconcile(dep)
            dep.refresh_from_db()
            if dep.state == State.READY and dep == borrower:
                pods = gpu_pods(kube, dep)
                assert pods and all(p["status"]["phase"] == "Running" for p in pods), "ready without its worker"
        return neighbour.state == State.READY and borrower.state == State.QUEUED

    kube.wait(lambda: both_settled(None), timeout=150, what="beta ready, alpha's borrower queued")
    # Why it went back to the queue stays in its events; its message is now the new Workload's.
    (requeued,) = borrower.events.filter(reason="Requeued")
    assert requeued.message.startswith("Preempted by a cohort neighbour reclaiming its own quota (Kueue: ")
    assert "reclamation within the cohort" in requeued.message
    replacement = kube.get(k8s.RAYSERVICE, borrower.resource_name, world.alpha.namespace)
    assert replacement["metadata"]["uid"] != first_uid
    assert condition(workload_of(kube, borrower), "QuotaReserved").get("status") == "False"
    own.refresh_from_db()
    assert own.state == State.READY
    assert all(p["status"]["phase"] == "Running" for p in gpu_pods(kube, own))


def test_an_autoscaling_deployment_is_charged_what_the_portal_sized_for_its_head(world, kube):
    """KubeRay adds the Ray autoscaler sidecar to the head of an autoscaling RayService and Kueue
    charges it (issue 38: 2500m / 8704Mi for a head the portal sized 2 / 8Gi). The portal sets the
    sidecar's resources and sizes the CPU flavor's quota for head + sidecar."""
    onboard(kube, world.h100)
    dep = request_and_approve(world, flavor=world.h100, name="elastic", min_replicas=1, max_replicas=2)
    converge(kube, dep, lambda d: d.state == State.READY, timeout=90, what="ready")
    workload = workload_of(kube, dep)
    usage = {a["name"]: a["resourceUsage"] for a in workload["status"]["admission"]["podSetAssignments"]}
    head = next(v for v in usage.values() if "nvidia.com/gpu" not in v)
    assert (head["cpu"], head["memory"]) == ("2500m", "8704Mi"), usage
    queue = kube.get(k8s.CLUSTERQUEUE, f"tenant-{world.alpha.slug}")
    cpu_flavor = queue["spec"]["resourceGroups"][0]["flavors"][0]
    quota = {r["name"]: r["nominalQuota"] for r in cpu_flavor["resources"]}
    # One head per nominal GPU of alpha (8 H100 + 4 A100): 12 x 2500m, 12 x 8704Mi.
    assert (str(quota["cpu"]), quota["memory"]) == ("30", "102Gi"), quota


def test_an_orphaned_rayservice_is_reported_and_its_delete_collects_everything_it_made(world, kube):
    """A portal-labelled RayService no deployment claims (a restored database, a lost row): the
    sweep reports it and nothing else; a platform admin's delete removes it, and the real garbage
    collector its RayCluster, pods and Workload; the next sweep finds no orphan."""
    onboard(kube, world.h100)
    dep = request_and_approve(world, flavor=world.h100, name="kept")
    converge(kube, dep, lambda d: d.state == State.READY, what="ready")
    spec = replace(deployment_spec(dep), deployment_id=9999, name="ghost-9999")
    backend = get_backend("kuberay")
    kube.admin.apply(backend.desired(spec))
    kube.wait(lambda: kube.pods(dep.tenant.namespace) and len(pods_named(kube, "ghost-9999")) == 2, what="ghost runs")

    report = sweep()
    assert report["orphans"] == [f"{dep.tenant.namespace}/ghost-9999"], report
    assert [(o["kind"], o["name"]) for o in last_orphans()] == [("RayService", "ghost-9999")]

    assert orphan_delete(
        actor=world.users["platform_admin"], backend="kuberay", namespace=dep.tenant.namespace, name="ghost-9999"
    )
    kube.wait(lambda: not pods_named(kube, "ghost-9999"), timeout=60, what="the ghost's pods collected")
    kube.wait(
        lambda: all("ghost" not in w["metadata"]["name"] for w in kube.list(k8s.WORKLOAD, dep.tenant.namespace)),
        timeout=60,
        what="the ghost's Workload collected",
    )
    assert sweep()["orphans"] == []
    dep.refresh_from_db()
    assert dep.state == State.READY and len(pods_of(kube, dep)) == 2  # the claimed deployment is untouched


def pods_named(kube, prefix: str) -> list[dict]:
    return [p for p in kube.pods("alpha") if p["metadata"]["name"].startswith(f"{prefix}-")]
