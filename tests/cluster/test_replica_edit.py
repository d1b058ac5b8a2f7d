"""A worker-count change on a running RayService, on the real Kueue 0.19.2 and KubeRay 1.6.2 (issue 41).

Patching `replicas` / `minReplicas` / `maxReplicas` of a Kueue-managed RayService in place makes
Kueue delete the Workload that no longer matches and suspend the job; KubeRay then deletes every
pod (tests/cluster/test_states.py puts a cluster in that state). The portal instead renders every
RayService as an elastic Kueue job with the in-tree autoscaler and moves a count change on the
running RayCluster, as the Ray autoscaler does: Kueue admits the new count as a Workload slice
while the old slice keeps serving (runtime/backends/rayresize.py has the upstream code). Here, at
every step after the approval: the same RayService and Ray cluster, the first worker Running, a
Workload admitted, and the portal `ready`, until the new size runs.
"""

from __future__ import annotations

from deployments import services
from deployments.choices import State
from quotas.specs import flavor_spec
from runtime import k8s
from runtime.backends.rayresize import ANNOTATION_RESIZING
from runtime.manifests.kueue import render_resource_flavor
from runtime.status import current_workload
from tests.cluster.chain import condition, converge, onboard, request_and_approve, workload_of
from tests.cluster.test_slices import gpu_count, slices_of, workers


def _truthful(kube, dep) -> None:
    """The portal never says `ready` unless the cluster serves: an admitted Workload, a Ready
    RayService, and at least one GPU worker Running."""
    if dep.state != State.READY:
        return
    workload = workload_of(kube, dep)
    assert condition(workload, "Admitted").get("status") == "True", (dep.status_message, workload)
    service = kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)
    assert condition(service, "Ready").get("status") == "True", service.get("status")
    running = workers(kube, dep, service["status"]["activeServiceStatus"]["rayClusterName"])
    assert any(p["status"].get("phase") == "Running" for p in running), dep.status_message


class Serving:
    """What must hold at every step of a resize: nothing replaced, the first worker serving."""

    def __init__(self, kube, dep):
        self.kube = kube
        service = kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)
        self.uid = service["metadata"]["uid"]
        self.cluster = service["status"]["activeServiceStatus"]["rayClusterName"]
        (first,) = workers(kube, dep, self.cluster)
        self.worker = first["metadata"]["uid"]
        self.reasons: list[str] = []

    def check(self, dep) -> None:
        assert dep.state == State.READY, (dep.state, dep.status_message)
        _truthful(self.kube, dep)
        service = self.kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)
        assert service["metadata"]["uid"] == self.uid, "the RayService was replaced"
        assert service["status"]["activeServiceStatus"]["rayClusterName"] == self.cluster
        pods = {p["metadata"]["uid"]: p for p in workers(self.kube, dep, self.cluster)}
        assert self.worker in pods and pods[self.worker]["status"].get("phase") == "Running", "first worker gone"
        live = [w for w in slices_of(self.kube, dep) if condition(w, "Finished").get("status") != "True"]
        assert any(condition(w, "Admitted").get("status") == "True" for w in live), "no admitted Workload"
        self.reasons.append(dep.condition("Ready")["reason"])


def _change(world, dep, **data):
    dep = services.deployment_update(deployment_id=dep.pk, user=world.users["member"], data=data)
    if dep.proposed_number:  # fewer GPUs need no approval: it serves at once
        services.deployment_approve(
            deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
        )
    dep.refresh_from_db()
    return dep


def _grown(kube, dep, serving: Serving, count: int) -> bool:
    serving.check(dep)
    live = current_workload(slices_of(kube, dep))
    pods = workers(kube, dep, serving.cluster)
    service = kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)
    return (
        gpu_count(live) == count
        and condition(live, "Admitted").get("status") == "True"
        and len(pods) == count
        and all(p["status"].get("phase") == "Running" for p in pods)
        and dep.condition("Ready")["reason"] == "Ready"
        and ANNOTATION_RESIZING not in (service["metadata"].get("annotations") or {})
    )


def test_a_worker_count_change_resizes_the_running_cluster_and_stays_ready_until_the_new_size_runs(world, kube):
    # One GPU per node: the second worker has nowhere to run until a node is added, so the
    # portal is seen serving on the first one while the cluster grows.
    onboard(kube, world.h100, gpus=1)
    dep = request_and_approve(world, flavor=world.h100, min_replicas=1, max_replicas=1)
    converge(kube, dep, lambda d: d.state == State.READY, what="ready")
    serving = Serving(kube, dep)
    assert dep.reserved_gpus == 1

    dep = _change(world, dep, min_replicas=2, max_replicas=2)
    assert dep.reserved_gpus == 2  # the difference reserved at approval, for both slices' life

    def waiting(d) -> bool:
        serving.check(d)
        return d.condition("Ready")["reason"] == "Resizing" and "Pending" in d.status_message

    converge(kube, dep, waiting, timeout=90, what="ready on one worker while the second waits for a node")
    assert "grows to 2" in dep.status_message, dep.status_message
    assert dep.events.filter(reason="Resizing").exists()

    kube.nodes_for_flavor(render_resource_flavor(flavor_spec(world.h100)), gpus=1)
    converge(kube, dep, lambda d: _grown(kube, d, serving, 2), timeout=120, what="two workers on the same cluster")
    assert not dep.events.filter(reason="Recreating").exists()

    # And back (fewer GPUs: no approval needed): the newest worker goes, the first stays, and
    # Kueue's Workload shrinks with it.
    dep = _change(world, dep, min_replicas=1, max_replicas=1)
    assert dep.proposed_number is None
    converge(kube, dep, lambda d: _grown(kube, d, serving, 1), timeout=90, what="one worker again, same cluster")
    assert dep.reserved_gpus == 1


def test_a_worker_pending_on_a_missing_claim_is_not_ready(world, kube, settings):
    """KubeRay's Ready=True only says the Serve endpoints answer (the head's); a GPU worker that
    cannot be scheduled must show as provisioning with the scheduler's reason."""
    settings.MODEL_CACHE_PVC = "absent-claim"
    onboard(kube, world.h100)  # provisions "absent-claim"... then delete it before the pods ask
    kube.plane.request("DELETE", f"/api/v1/namespaces/{world.alpha.namespace}/persistentvolumeclaims/absent-claim")
    dep = request_and_approve(world, flavor=world.h100)

    def settled(d):
        service = kube.get(k8s.RAYSERVICE, d.resource_name, d.tenant.namespace)
        return condition(service, "Ready").get("status") == "True" and d.state == State.PROVISIONING

    converge(kube, dep, settled, timeout=90, what="RayService Ready while the worker is Pending")
    assert 'persistentvolumeclaim "absent-claim" not found' in dep.status_message, dep.status_message
