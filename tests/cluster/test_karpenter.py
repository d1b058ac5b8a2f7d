"""The portal's Karpenter NodePools on the real Karpenter 1.14.1 (its KWOK provider), Kueue 0.19.2
and KubeRay 1.6.2 (issue 39).

Only the KWOK cloud provider runs here (the AWS one needs EC2), so the portal is configured as on a
cluster off AWS: its NodePools name the node class of KARPENTER_NODE_CLASS_GROUP / _KIND / _NAME,
here the plane's `KWOKNodeClass` (tests/support/controlplane/karpenter.py). Everything else in the
pool is the portal's own, applied by its Kueue sync as its ServiceAccount. Its instance types are
the provider's AWS list with GPUs added: the H100 flavor of the test world pins `p5.48xlarge`
(eight GPUs), so one pool node holds eight of the flavor's GPUs.

Karpenter's timing, read from sigs.k8s.io/karpenter v1.14.1: the disruption controller polls every
10 s (pkg/controllers/disruption/controller.go `pollingPeriod`) and an empty-node command waits 15 s
before it checks that the nodes are still empty (consolidation.go `commandValidationDelay`, used by
emptiness.go ComputeCommands), so an idle node goes `consolidateAfter` + at most 25 s after its last
pod plus the time to delete it.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request

import pytest

from deployments import services
from deployments.choices import State
from quotas.kueue import sync_kueue
from quotas.models import GpuFlavor, TenantQuota
from quotas.provisioning import clean_provisioning
from quotas.specs import flavor_spec
from runtime.k8s.kinds import NODEPOOL
from runtime.manifests.karpenter import serving_pod_annotations
from runtime.manifests.kueue import render_resource_flavor
from tests.cluster.chain import condition, converge, onboard, request_and_approve, workload_of
from tests.support.controlplane.karpenter import NODE_CLASS

PROBE = "karpenter-probe"  # a namespace outside Kueue: the limit and disruption tests' own pods
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
POOL_LABEL = "karpenter.sh/nodepool"
# disruption/controller.go pollingPeriod + consolidation.go commandValidationDelay (module docstring).
POLL_AND_VALIDATION_S = 10 + 15


@pytest.fixture(scope="module")
def karpenter(control_plane):
    """Karpenter on the session's plane for this module; stopped once its nodes are gone."""
    control_plane.start_karpenter()
    try:
        yield control_plane
    finally:
        remove_pools(control_plane)
        _wait(lambda: not control_plane.request("GET", NODECLAIMS)["items"], 60, "the pools' nodes removed")
        control_plane.stop_karpenter()


@pytest.fixture
def pools(karpenter, kube, settings):
    """The portal configured as off AWS with the plane's KWOKNodeClass; afterwards the pools are
    deleted (Karpenter then removes their nodes once kube's cleanup deleted the pods)."""
    _wait(lambda: not karpenter.request("GET", NODECLAIMS)["items"], 60, "no node left from an earlier test")
    settings.KARPENTER_PLATFORM = "kwok"
    settings.KARPENTER_NODE_CLASS_GROUP = NODE_CLASS["group"]
    settings.KARPENTER_NODE_CLASS_KIND = NODE_CLASS["kind"]
    settings.KARPENTER_NODE_CLASS_NAME = NODE_CLASS["name"]
    yield karpenter
    remove_pools(karpenter)


def remove_pools(plane) -> None:
    """Delete the pools and their NodeClaims (Karpenter drains and deletes each node; deleting
    the claims at once spares waiting for the garbage collector to follow the pools)."""
    for path in (NODEPOOLS, NODECLAIMS):
        for obj in plane.request("GET", path)["items"]:
            plane.request("DELETE", f"{path}/{obj['metadata']['name']}")


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def provision(flavor, **settings) -> None:
    """Give the flavor the portal's provisioning settings, cleaned as its form would; the pool
    launches the instance type the flavor's node label names."""
    pinned = [flavor.node_labels["node.kubernetes.io/instance-type"]]
    cleaned, problems = clean_provisioning(
        {**(flavor.provisioning or {}), "instance_types": pinned, **settings}, node_labels=flavor.node_labels
    )
    assert not problems, problems
    flavor.provisioning = cleaned
    flavor.save()


def nodeclaims(kube, pool: str) -> list[dict]:
    return [c for c in kube.raw(NODECLAIMS)["items"] if c["metadata"]["labels"].get(POOL_LABEL) == pool]


def pool_nodes(kube, pool: str) -> dict[str, dict]:
    return {n["metadata"]["name"]: n for n in kube.raw(f"/api/v1/nodes?labelSelector={POOL_LABEL}%3D{pool}")["items"]}


def events(kube, name: str, reason: str) -> list[str]:
    found = kube.raw(f"/api/v1/events?fieldSelector=involvedObject.name%3D{name}")["items"]
    return [e["message"] for e in found if e["reason"] == reason]


def eligible_nodes(plane, reason: str) -> float | None:
    """Karpenter's gauge of the nodes a disruption method found to be candidates on its last run
    (disruption/controller.go disrupt: `EligibleNodes`, set before budgets are applied)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{plane.ports['karpenter_metrics']}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = re.search(rf'^karpenter_voluntary_disruption_eligible_nodes{{reason="{reason}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def gpu_worker(kube, dep) -> dict | None:
    for pod in kube.pods(dep.tenant.namespace):
        if any("nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {}) for c in pod["spec"]["containers"]):
            return pod
    return None


def unschedulable(pod: dict | None) -> bool:
    return condition(pod, "PodScheduled").get("reason") == "Unschedulable"


def probe_pod_template(flavor, gpus: int, annotations: dict[str, str]) -> dict:
    """A pod pinned like the flavor's admitted pods: its ResourceFlavor's labels and tolerations."""
    spec = render_resource_flavor(flavor_spec(flavor))["spec"]
    return {
        "metadata": {"labels": {"app": "probe"}, "annotations": annotations},
        "spec": {
            "nodeSelector": spec["nodeLabels"],
            "tolerations": spec.get("tolerations", []),
            "containers": [{"name": "serve", "image": "probe", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }


def probe_deployment(flavor, name: str, gpus: int, annotations: dict[str, str]) -> dict:
    template = probe_pod_template(flavor, gpus, annotations)
    template["metadata"]["labels"] = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


def l4_flavor(world) -> GpuFlavor:
    """A second provisioned flavor, four L4 per `g6.12xlarge` node, with a pool of its own."""
    flavor = GpuFlavor.objects.create(
        name="l4",
        gpu_model="L4",
        accelerator_type="L4",
        gpu_memory_gib=24,
        gpus_per_node=4,
        cpu_per_gpu=8,
        memory_gib_per_gpu=32,
        node_labels={"node.kubernetes.io/instance-type": "g6.12xlarge"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    TenantQuota.objects.create(tenant=world.alpha, flavor=flavor, nominal_gpus=12)  # three nodes
    provision(flavor)
    return flavor


def test_a_pool_scales_up_for_an_admitted_deployment_keeps_serving_nodes_and_goes_back_to_zero(world, kube, pools):
    """One walk, so that Karpenter's fixed delays overlap (about 25 s of them before an idle node
    goes: module docstring).

    (a) Kueue admits the RayService on quota alone; KubeRay then makes the GPU worker, which no
    node fits (the H100 pool is at zero) until Karpenter launches one from the portal's pool for
    it; then it runs and the deployment is ready.

    (d) On the L4 pool, two whole-node deployments identical but for the serving pods'
    `do-not-disrupt` annotation. A pool setting changed in the portal (expire_after: hashed into
    the pool's template, so every node drifts) leaves both nodes: the portal's budget allows no
    `Drifted` disruption, and the annotated pod's node is no candidate at all (disruption/types.go
    NewCandidate: StateNode.ValidatePodsDisruptable). Without that budget (patched away, as in a
    pool that lacks it) Karpenter replaces the plain deployment's node and keeps the other.

    (c) Meanwhile the RayService is deleted and its idle H100 node removed: the pool is back at
    zero within the flavor's `consolidate_after` (the portal's provisioning setting, 1 s here)
    plus Karpenter's poll and validation delays and the node's deletion.
    """
    provision(world.h100, consolidate_after="1s")
    l4 = l4_flavor(world)
    onboard(kube, world.h100, l4, gpu_nodes=0)  # the Kueue sync applies the pools; one CPU node for heads
    pool = kube.get(NODEPOOL, world.h100.name)
    assert pool["spec"]["template"]["spec"]["nodeClassRef"] == NODE_CLASS
    assert pool["spec"]["limits"] == {"nvidia.com/gpu": 16}  # alpha 8 + beta 8 nominal
    assert not pool_nodes(kube, world.h100.name)

    # (a)
    dep = request_and_approve(world, flavor=world.h100, name="chat")
    converge(kube, dep, lambda d: unschedulable(gpu_worker(kube, dep)), what="the worker Pending, no node fits")
    admitted = condition(workload_of(kube, dep), "Admitted")
    assert admitted.get("status") == "True", admitted
    # KubeRay made the worker only once Kueue unsuspended the admitted RayService.
    assert gpu_worker(kube, dep)["metadata"]["creationTimestamp"] >= admitted["lastTransitionTime"]

    converge(kube, dep, lambda d: d.state == State.READY, timeout=60, what="ready on a node Karpenter launched")
    worker = gpu_worker(kube, dep)
    (claim,) = nodeclaims(kube, world.h100.name)
    nodes = pool_nodes(kube, world.h100.name)
    assert worker["status"]["phase"] == "Running" and list(nodes) == [claim["status"]["nodeName"]]
    node = nodes[worker["spec"]["nodeName"]]
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert node["metadata"]["labels"]["llm-portal.io/flavor"] == world.h100.name
    assert {"key": "nvidia.com/gpu", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert worker["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    # Karpenter launched that node for this pod (provisioning/scheduling/events.go NominatePodEvent).
    nominated = events(kube, worker["metadata"]["name"], "Nominated")
    assert f"Pod should schedule on: nodeclaim/{claim['metadata']['name']}" in nominated, nominated

    # (d)
    kube.plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": PROBE}})
    apps = f"/apis/apps/v1/namespaces/{PROBE}/deployments"
    kube.plane.request("POST", apps, probe_deployment(l4, "kept", 4, serving_pod_annotations()))
    kube.plane.request("POST", apps, probe_deployment(l4, "plain", 4, {}))

    def running() -> dict[str, str]:
        return {
            p["metadata"]["labels"]["app"]: p["spec"]["nodeName"]
            for p in kube.pods(PROBE)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        }

    placed = kube.wait(lambda: len(set((r := running()).values())) == 2 and r, timeout=60, what="two L4 nodes")
    provision(l4, expire_after="721h")
    sync_kueue()

    def drifted() -> bool:
        claims = nodeclaims(kube, l4.name)
        return len(claims) == 2 and all(condition(c, "Drifted").get("status") == "True" for c in claims)

    kube.wait(drifted, timeout=30, what="both L4 nodes Drifted")
    # Two nodes drifted, both running their pod, nothing pending, nothing being disrupted: one
    # candidate, so the annotated pod's node is none. (Its DisruptionBlocked event says why, but
    # Karpenter dedupes those per node and reason for 2 minutes whatever the message, events/
    # recorder.go dedupeKey, so the first, perhaps transient, reason may be the only one shown.)
    kube.wait(lambda: eligible_nodes(kube.plane, "drifted") == 1, timeout=40, what="one drift candidate")
    blocked = "No allowed disruptions for disruption reason Drifted due to blocking budget"
    kube.wait(lambda: blocked in events(kube, l4.name, "DisruptionBlocked"), timeout=30, what=blocked)
    assert running() == placed and set(pool_nodes(kube, l4.name)) == set(placed.values())

    # (c) begins: the deployment goes, its node is idle.
    services.deployment_delete(deployment_id=dep.pk, user=world.users["member"])
    converge(kube, dep, lambda d: d.state == State.DELETED, timeout=60, what="deleted")
    kube.wait(lambda: gpu_worker(kube, dep) is None, timeout=30, what="the worker gone")
    emptied = time.monotonic()

    # A pool without the portal's budget: Karpenter's default budget, 10% of the nodes (one).
    budgets = json.dumps({"spec": {"disruption": {"budgets": [{"nodes": "10%"}]}}})
    kube.plane.kubectl("patch", "nodepool", l4.name, "--type=merge", "-p", budgets)
    kube.wait(
        lambda: placed["plain"] not in pool_nodes(kube, l4.name) and running().get("plain"),
        timeout=60,
        what="the plain deployment's node replaced",
    )
    now = running()
    assert now["kept"] == placed["kept"] and now["plain"] != placed["plain"]
    assert placed["kept"] in pool_nodes(kube, l4.name)
    (kept_claim,) = [c for c in nodeclaims(kube, l4.name) if c["status"].get("nodeName") == placed["kept"]]
    assert condition(kept_claim, "Drifted").get("status") == "True"

    # (c)
    bound = 1 + POLL_AND_VALIDATION_S + 20  # consolidate_after, Karpenter's delays, the deletion
    kube.wait(
        lambda: not nodeclaims(kube, world.h100.name) and not pool_nodes(kube, world.h100.name),
        timeout=max(bound - (time.monotonic() - emptied), 1),
        what="the idle H100 pool back at zero",
    )


def test_the_pools_limit_from_the_quotas_stops_karpenter(world, kube, pools):
    """(b) The pool's limit is the flavor's nominal quotas in whole nodes. Kueue never admits
    beyond them, so the limit is the backstop for pods Kueue does not gate: two whole-node pods in
    a namespace outside Kueue get one node, and Karpenter says the second exceeds the limit."""
    TenantQuota.objects.filter(tenant=world.beta, flavor=world.h100).delete()
    provision(world.h100)
    sync_kueue()
    assert kube.get(NODEPOOL, world.h100.name)["spec"]["limits"] == {"nvidia.com/gpu": 8}

    kube.plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": PROBE}})
    for name in ("first", "second"):
        pod = probe_pod_template(world.h100, 8, {})
        pod["metadata"]["name"] = name
        kube.plane.request("POST", f"/api/v1/namespaces/{PROBE}/pods", pod)

    def over_limit():
        return [m for name in ("first", "second") for m in events(kube, name, "FailedScheduling") if "limits" in m]

    (message,) = kube.wait(over_limit, timeout=60, what="Karpenter refusing a node beyond the limit")
    assert f"all available instance types exceed limits for nodepool (NodePool={world.h100.name})" in message
    kube.wait(lambda: len(pool_nodes(kube, world.h100.name)) == 1, timeout=30, what="one node")
    kube.wait(
        lambda: sorted(p["status"].get("phase") for p in kube.pods(PROBE)) == ["Pending", "Running"],
        timeout=30,
        what="one pod running, one pending",
    )
    assert len(nodeclaims(kube, world.h100.name)) == 1
