"""The states a running deployment can fall into, put there on the real KubeRay 1.6.2 through the
stand-in Ray head's Serve API (tests/support/controlplane/rayhead.py): an unhealthy application
is `degraded` and recovers to `ready`; one that fails to deploy is `failed` and its GPUs are
released (issue 41: every state the portal shows has a test that puts the cluster in it)."""

from __future__ import annotations

import json

from deployments.choices import State
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


def test_worker_counts_edited_on_the_cluster_leave_no_workload_and_the_portal_replaces_it(world, kube, monkeypatch):
    """Someone patches replicas, minReplicas and maxReplicas of a running RayService (issue 41:
    Kueue deletes the Workload, suspends the job, and never creates another). The portal sees a
    suspended RayService with no Workload, replaces it, and the approved spec runs again."""
    from runtime import status

    onboard(kube, world.h100)
    dep = request_and_approve(world, flavor=world.h100)
    converge(kube, dep, lambda d: d.state == State.READY, what="ready")
    monkeypatch.setattr(status, "WORKLOAD_GRACE_SECONDS", 5)  # the object is older than that already
    fields = ("replicas", "minReplicas", "maxReplicas")
    ops = [{"op": "replace", "path": f"/spec/rayClusterConfig/workerGroupSpecs/0/{f}", "value": 2} for f in fields]
    kube.plane.kubectl(
        "patch", "rayservice", dep.resource_name, "-n", dep.tenant.namespace, "--type=json", f"-p={json.dumps(ops)}"
    )
    kube.wait(lambda: workload_of(kube, dep) is None, timeout=30, what="Kueue deleting the Workload")

    converge(kube, dep, lambda d: d.events.filter(reason="Requeued").exists(), timeout=60, what="replaced")
    converge(kube, dep, lambda d: d.state == State.READY, timeout=90, what="ready again")
    service = kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)
    assert service["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] == 1  # the approved spec
    assert condition(workload_of(kube, dep), "Admitted").get("status") == "True"
