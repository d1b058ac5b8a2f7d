"""The states a running deployment can fall into, put there on the real KubeRay 1.6.2 through the
stand-in Ray head's Serve API (tests/support/controlplane/rayhead.py): an unhealthy application
is `degraded` and recovers to `ready`; one that fails to deploy is `failed` and its GPUs are
released (issue 41: every state the portal shows has a test that puts the cluster in it)."""

from __future__ import annotations

import json
import time

from deployments.choices import State
from deployments.reconcile import reconcile
from runtime import k8s
from tests.cluster.chain import condition, converge, onboard, request_and_approve, workload_of


def head_ip(kube, dep) -> str:
    (head,) = [
        p
        for p in kube.pods(dep.tenant.namespace)
        if p["metadata"]["name"].startswith(f"{dep.resource_name}-") and "-head-" in p["metadata"]["name"]
    ]
    return head["status"]["podIP"]


def test_an_unhealthy_application_is_degraded_then_ready_and_a_failed_deploy_releases_the_gpus(world, kube):
    onboard(kube, world.h100)
    dep = request_and_approve(world, flavor=world.h100)
    converge(kube, dep, lambda d: d.state == State.READY, what="ready")
    ip = head_ip(kube, dep)

    kube.set_head_status(ip, "UNHEALTHY", "replica llm-0 failed its health check")
    converge(kube, dep, lambda d: d.state == State.DEGRADED, timeout=60, what="degraded")
    assert "failed its health check" in dep.status_message, dep.status_message
    assert dep.reserved_gpus == dep.gpus_needed  # degraded still holds its GPUs

    kube.set_head_status(ip, "RUNNING")
    converge(kube, dep, lambda d: d.state == State.READY, timeout=60, what="ready again")

    kube.set_head_status(ip, "DEPLOY_FAILED", "the engine could not load the model")
    converge(kube, dep, lambda d: d.state == State.FAILED, timeout=60, what="failed")
    assert "could not load the model" in dep.status_message, dep.status_message
    assert dep.reserved_gpus == 0


def test_worker_counts_edited_on_the_rayservice_on_the_cluster_evict_nothing(world, kube):
    """Someone patches replicas, minReplicas and maxReplicas of a running RayService (issue 41: on
    a plain RayService Kueue deletes the Workload, suspends the job, and never creates another).
    Every RayService the portal makes is an elastic job with the in-tree autoscaler, whose worker
    counts Kueue reads from the running RayCluster (kubernetes-sigs/kueue pkg/controller/jobs/
    raycluster/common.go `UpdatePodSets`, v0.19.2) and KubeRay never copies over (its cluster hash
    leaves them out: ray-project/kuberay ray-operator/controllers/ray/utils/util.go, v1.6.2): the
    edit moves nothing, and the deployment keeps serving on its admitted Workload."""
    onboard(kube, world.h100)
    dep = request_and_approve(world, flavor=world.h100)
    converge(kube, dep, lambda d: d.state == State.READY, what="ready")
    workload = workload_of(kube, dep)["metadata"]["name"]
    pods = sorted(p["metadata"]["uid"] for p in kube.pods(dep.tenant.namespace))
    fields = ("replicas", "minReplicas", "maxReplicas")
    ops = [{"op": "replace", "path": f"/spec/rayClusterConfig/workerGroupSpecs/0/{f}", "value": 2} for f in fields]
    kube.plane.kubectl(
        "patch", "rayservice", dep.resource_name, "-n", dep.tenant.namespace, "--type=json", f"-p={json.dumps(ops)}"
    )
    deadline = time.monotonic() + 20  # Kueue evicted a plain RayService within seconds (issue 41)
    while time.monotonic() < deadline:
        dep.refresh_from_db()
        reconcile(dep)
        dep.refresh_from_db()
        live = workload_of(kube, dep)
        assert live is not None and live["metadata"]["name"] == workload, "Kueue replaced or deleted the Workload"
        assert condition(live, "Admitted").get("status") == "True"
        assert sorted(p["metadata"]["uid"] for p in kube.pods(dep.tenant.namespace)) == pods
        assert dep.state == State.READY, dep.status_message
        time.sleep(2)
    service = kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)
    assert service["spec"]["rayClusterConfig"].get("suspend") is not True
    # The counts are the portal's (KubeRay rebuilds the RayCluster from them when it updates it):
    # the reconcile set them back, and said so.
    (group,) = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 1)
    assert dep.events.filter(reason="Updated", message__contains="set back").exists()
