"""Request → approve → Kueue suspends → Workload admitted in the reserved flavor → RayCluster →
pods bound to a KWOK node of that flavor → RayService Ready, on the real controllers."""

from deployments.choices import State
from runtime import k8s
from tests.cluster.chain import condition, converge, onboard, request_and_approve, workload_of


def test_an_approved_request_runs_on_the_flavor_it_reserved_and_the_portal_says_ready(world, kube):
    onboard(kube, world.h100, world.a100)
    dep = request_and_approve(world, flavor=world.h100)
    assert dep.state == State.APPROVED
    converge(kube, dep, lambda d: d.state == State.READY, what="ready")

    namespace = dep.tenant.namespace
    workload = workload_of(kube, dep)
    assert condition(workload, "Admitted")["status"] == "True"
    flavors = {ps["name"]: ps["flavors"] for ps in workload["status"]["admission"]["podSetAssignments"]}
    assert [f for name, fl in flavors.items() for f in fl.values() if "gpu" in name or "worker" in name]
    service = kube.get(k8s.RAYSERVICE, dep.resource_name, namespace)
    assert condition(service, "Ready")["status"] == "True"
    nodes = {n: kube.raw(f"/api/v1/nodes/{n}")["metadata"]["labels"] for n in kube.nodes}
    pods = kube.pods(namespace)
    pending = [
        (p["metadata"]["name"], [c.get("message") for c in p["status"].get("conditions", [])])
        for p in pods
        if p["status"]["phase"] != "Running"
    ]
    assert not pending, pending
    for pod in pods:
        labels = nodes[pod["spec"]["nodeName"]]
        wants_gpu = any(
            "nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {}) for c in pod["spec"]["containers"]
        )
        assert ("nvidia.com/gpu.product" in labels or world.h100.name in labels.values()) == wants_gpu, (pod, labels)
    assert dep.reserved_gpus == dep.gpus_needed
