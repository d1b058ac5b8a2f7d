"""A worker-count change on a running RayService, on the real Kueue 0.19.2 and KubeRay 1.6.2.

Patching `replicas` / `minReplicas` / `maxReplicas` of a Kueue-managed RayService in place makes
Kueue delete the Workload that no longer matches and suspend the job; KubeRay then deletes every
pod, and when min, max and replicas all change Kueue never creates a new Workload (issue 41: no
Workload after 8 minutes). The portal therefore never edits pod counts in place: the approved
change replaces the Ray cluster (a new RayService object, so a new Workload), and at every step
the state the portal shows is the cluster's.
"""

from deployments import services
from deployments.choices import State
from runtime import k8s
from tests.cluster.chain import condition, converge, onboard, request_and_approve, workload_of


def _truthful(kube, dep) -> None:
    """The portal never says `ready` unless the cluster serves: an admitted Workload, Ready
    RayService, and every pod Running."""
    if dep.state != State.READY:
        return
    workload = workload_of(kube, dep)
    assert condition(workload, "Admitted").get("status") == "True", (dep.status_message, workload)
    pods = kube.pods(dep.tenant.namespace)
    assert pods and all(p["status"]["phase"] == "Running" for p in pods), [
        (p["metadata"]["name"], p["status"]["phase"]) for p in pods
    ]


def test_a_worker_count_change_ends_with_the_new_size_running_and_never_claims_ready_without_it(world, kube):
    onboard(kube, world.h100)
    dep = request_and_approve(world, flavor=world.h100, min_replicas=1, max_replicas=1)
    converge(kube, dep, lambda d: d.state == State.READY, what="ready")
    first_uid = kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)["metadata"]["uid"]

    dep = services.deployment_update(
        deployment_id=dep.pk, user=world.users["member"], data={"min_replicas": 2, "max_replicas": 2}
    )
    services.deployment_approve(
        deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
    )

    def done(d):
        _truthful(kube, d)
        service = kube.get(k8s.RAYSERVICE, d.resource_name, d.tenant.namespace)
        workload = workload_of(kube, d)
        counts = [ps["count"] for ps in (workload or {}).get("spec", {}).get("podSets", [])]
        return d.state == State.READY and service and service["metadata"]["uid"] != first_uid and 2 in counts

    converge(kube, dep, done, timeout=120, what="ready with 2 workers on a new Workload")
    service = kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)
    active = service["status"]["activeServiceStatus"]["rayClusterName"]
    workers = [
        p
        for p in kube.pods(dep.tenant.namespace)
        if p["metadata"]["labels"].get("ray.io/cluster") == active and "worker" in p["metadata"]["name"]
    ]
    assert len(workers) == 2 and all(p["status"]["phase"] == "Running" for p in workers), service["status"]
    assert dep.reserved_gpus == 2


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
