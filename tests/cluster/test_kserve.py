"""The kserve backend in KServe's Standard mode on the real control plane: the KServe 0.20.0
controller, Kueue 0.19.2 with its `pod` and `deployment` integrations (ControlPlane(kserve=True),
../shared/k8s README "KServe"), KWOK GPU nodes.

The portal applies the InferenceService; KServe makes the Deployment and the `<name>-predictor`
Service; Kueue gates the predictor pod and makes it a Workload of its own (`pod-<pod>-<hash>`,
owned by the pod), which the backend finds through the pod; the portal says queued, then ready
once KServe does. A deployment the cohort has no room for is queued with its position.

This plane runs for this module only (Kueue's pod integration is off on the session's plane).
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from deployments.choices import State
from deployments.reconcile import reconcile
from deployments.specs import deployment_spec
from deployments.sweep import sweep
from runtime import k8s
from runtime.backends import get_backend
from runtime.manifests.common import ANNOTATION_GENERATION, ANNOTATION_SPEC_HASH
from runtime.manifests.kserve import LABEL_ISVC, PORTAL_ANNOTATIONS, pod_requests
from runtime.platform import platform_spec
from tests.cluster.chain import onboard, request_and_approve
from tests.support.controlplane.binaries import Unavailable
from tests.support.controlplane.fixtures import Kube, _unavailable
from tests.support.controlplane.identity import portal_identity


@pytest.fixture(scope="module")
def kserve_plane():
    from tests.support.controlplane.plane import ControlPlane, sweep_stale

    if os.geteuid() != 0:
        _unavailable("the pod network namespace needs root (ip netns)")
    sweep_stale()
    try:
        plane = ControlPlane(kserve=True)
    except Unavailable as error:
        _unavailable(str(error))
    plane.start()
    try:
        plane.portal_kubeconfig = portal_identity(plane)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kube(kserve_plane, settings):
    """The KServe plane for one test, the portal pointed at it as its ServiceAccount. Nothing is
    cleaned: the plane goes with the module."""
    settings.KUBERNETES_URL = None
    settings.KUBECONFIG = str(kserve_plane.portal_kubeconfig)
    settings.KUBERNETES_TIMEOUT_SECONDS = 10.0
    settings.KSERVE_DEPLOYMENT_MODE = "Standard"
    # No model-cache claim: the chain tests cover it (quotas.model_cache); this test is KServe and Kueue's.
    settings.MODEL_CACHE_PVC = ""
    return Kube(kserve_plane)


def settle(kube, deps, until, *, timeout: float = 60, what: str = "state"):
    """Reconcile every deployment as the worker would until `until(dep)` holds for each."""

    def step():
        for dep in deps:
            dep.refresh_from_db()
            reconcile(dep)
            dep.refresh_from_db()
        return all(until(dep) for dep in deps)

    try:
        kube.wait(step, timeout=timeout, what=what)
    except AssertionError as exc:
        story = "\n".join(f"{d.resource_name}: {d.state} {d.status_message}" for d in deps)
        raise AssertionError(f"{story}\n{kserve_story(kube)}\n{exc}") from None


def kserve_story(kube) -> str:
    proc = kube.plane.procs.get("kserve")
    lines = proc.log.read_text(errors="replace").splitlines()[-20:] if proc else []
    return "--- kserve ---\n" + "\n".join(lines)


def predictor_deployment(kube, dep) -> dict:
    return kube.raw(f"/apis/apps/v1/namespaces/{dep.tenant.namespace}/deployments/{dep.resource_name}-predictor")


def test_a_standard_predictor_is_queued_by_its_pods_workload_then_ready_and_a_reclaimed_borrower_queues_with_a_position(
    world, kube
):
    onboard(kube, world.h100, gpu_nodes=3, gpus=8)
    backend = get_backend("kserve")
    first = request_and_approve(world, flavor=world.h100, name="first", backend="kserve", tensor_parallel_size=8)
    reconcile(first)
    first.refresh_from_db()
    # No pod has a Workload yet (KServe is still making the Deployment), or its pod's is pending.
    assert first.state == State.QUEUED, first.status_message
    settle(kube, [first], lambda d: d.state == State.READY, what="first ready")

    namespace = first.tenant.namespace
    isvc = kube.get(k8s.INFERENCESERVICE, first.resource_name, namespace)
    (pod,) = [p for p in kube.pods(namespace) if p["metadata"]["labels"].get(LABEL_ISVC) == first.resource_name]
    assert pod["status"]["phase"] == "Running"
    workload = backend._workload(isvc)
    assert workload["metadata"]["name"].startswith(f"pod-{pod['metadata']['name']}-")
    assert [r["uid"] for r in workload["metadata"]["ownerReferences"]] == [pod["metadata"]["uid"]]
    assert any(c["type"] == "Admitted" and c["status"] == "True" for c in workload["status"]["conditions"])
    # What Kueue charged the pod is what the portal sized: the flavor's share for its 8 GPUs.
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    usage = assignment["resourceUsage"]
    millis, memory = pod_requests(deployment_spec(first), platform_spec())
    assert (usage["nvidia.com/gpu"], usage["cpu"], usage["memory"]) == (
        "8",
        str(millis // 1000),
        f"{memory // 2**30}Gi",
    )
    # KServe made `<name>-predictor` (port 80 to 8080): the Service the Gateway route targets.
    service = kube.raw(f"/api/v1/namespaces/{namespace}/services/{first.resource_name}-predictor")
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(80, 8080)]

    # The portal's annotations were on the InferenceService when KServe made the Deployment, and
    # the install keeps them off the pod template.
    deployment = predictor_deployment(kube, first)
    template = deployment["spec"]["template"]["metadata"].get("annotations") or {}
    assert not set(PORTAL_ANNOTATIONS) & set(template), template
    # A new spec hash the pods do not see (what a replica count or a route change makes): applied,
    # KServe reconciles at once (it watches InferenceServices with no predicate: inferenceservice/
    # controller.go), and the Deployment stays at its generation.
    desired = backend.desired(replace(deployment_spec(first), generation=first.generation + 1))
    desired["metadata"]["annotations"][ANNOTATION_SPEC_HASH] = "0" * 16
    backend.cluster.apply(desired)
    isvc = kube.get(k8s.INFERENCESERVICE, first.resource_name, namespace)
    assert isvc["metadata"]["annotations"][ANNOTATION_GENERATION] == str(first.generation + 1)

    # Alpha borrows 4 of beta's idle H100; beta then asks for its own 8: Kueue preempts the
    # borrower's pod (reclaimWithinCohort), the Deployment makes a new one, and its Workload waits.
    borrower = request_and_approve(world, flavor=world.h100, name="borrower", backend="kserve", tensor_parallel_size=4)
    settle(kube, [borrower], lambda d: d.state == State.READY, what="borrower ready on 4 borrowed")
    assert predictor_deployment(kube, first)["metadata"]["generation"] == deployment["metadata"]["generation"]
    own = request_and_approve(
        world, world.beta, flavor=world.h100, name="own", backend="kserve", tensor_parallel_size=8
    )
    settle(
        kube,
        [own, borrower],
        lambda d: d.state == (State.READY if d == own else State.QUEUED),
        what="beta ready, alpha's borrower queued",
    )
    sweep()
    borrower.refresh_from_db()
    assert borrower.state == State.QUEUED
    queue = borrower.condition("Admitted")["queue"]
    assert (queue["positionInLocalQueue"], queue["ofInLocalQueue"], queue["localQueue"]) == (1, 1, "alpha")
