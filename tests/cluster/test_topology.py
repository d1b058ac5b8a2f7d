"""Topology-aware placement on the real Kueue 0.19.2 (TAS) and scheduler, with KWOK nodes.

A flavor with topology levels (block, host) gets a Topology and its ResourceFlavor names it
(runtime/manifests/topology.py). A replica spread over two nodes (TP 8 x PP 2 on 8-GPU nodes)
asks for a slice of two pods in one block: with one node in block `a` and two in block `b`, Kueue
must place both pods in `b`, although the scheduler alone could split them.
"""

from __future__ import annotations

from deployments.choices import State
from quotas.models import TenantQuota
from quotas.specs import flavor_spec
from runtime import k8s
from runtime.manifests.kueue import render_resource_flavor
from tests.cluster.chain import converge, onboard, request_and_approve, workload_of
from tests.support.controlplane.fixtures import GPU_TAINT

BLOCK = "cloud.example.com/block"


def test_a_two_node_replica_is_placed_inside_one_block(world, kube):
    world.h100.topology_levels = [BLOCK, "kubernetes.io/hostname"]
    world.h100.save()
    TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(nominal_gpus=16)
    onboard(kube, world.h100, gpu_nodes=0)
    labels = dict(render_resource_flavor(flavor_spec(world.h100))["spec"]["nodeLabels"])
    in_a = kube.add_nodes({**labels, BLOCK: "a"}, count=1, gpus=8, taints=[GPU_TAINT])
    in_b = kube.add_nodes({**labels, BLOCK: "b"}, count=2, gpus=8, taints=[GPU_TAINT])

    flavor = kube.get(k8s.RESOURCEFLAVOR, world.h100.name)
    assert flavor["spec"]["topologyName"] == world.h100.name

    dep = request_and_approve(world, flavor=world.h100, name="spread", tensor_parallel_size=8, pipeline_parallel_size=2)
    converge(kube, dep, lambda d: d.state == State.READY, timeout=120, what="ready across two nodes")

    workers = [
        p
        for p in kube.pods(dep.tenant.namespace)
        if any("nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {}) for c in p["spec"]["containers"])
    ]
    assert len(workers) == 2 and all(p["status"]["phase"] == "Running" for p in workers)
    assert {p["spec"]["nodeName"] for p in workers} == set(in_b), (in_a, in_b)
    assignment = next(
        a for a in workload_of(kube, dep)["status"]["admission"]["podSetAssignments"] if a.get("topologyAssignment")
    )
    assert assignment["topologyAssignment"], assignment
