"""What Kueue would admit the portal's rendered objects into (tests/support/kueue_admission.py).

The ClusterQueue lists a tenant's flavors in name order, and Kueue takes the first flavor with
room whose node labels the pod does not rule out. These tests hold the rendered objects to the
promise the portal makes at approval: a deployment is charged to, and runs on, the flavor whose
GPUs the portal reserved, or it waits; never on another flavor.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.manifests import kueue as kueue_manifests
from runtime.manifests.kserve import render_inferenceservice
from runtime.manifests.rayservice import render_rayservice
from runtime.spec import DeploymentSpec, FlavorQuotaSpec, FlavorSpec, PlatformSpec, TenantQueueSpec, Toleration
from tests.support.kueue_admission import GPU, Node, admit, charged, place, quantity

# Alphabetical order puts A100 before H100 in the ClusterQueue, which is how the bug showed.
A100 = FlavorSpec(
    name="a100-pcie",
    gpu_model="A100 PCIe 80GB",
    accelerator_type="A100",
    gpu_memory_gib=80,
    gpus_per_node=4,
    node_labels=(("node.kubernetes.io/instance-type", "a2-ultragpu-4g"),),
)
H100 = FlavorSpec(
    name="h100-sxm5",
    gpu_model="H100 SXM5",
    accelerator_type="H100",
    gpu_memory_gib=80,
    gpus_per_node=8,
    cpu_per_gpu=12,
    memory_gib_per_gpu=120,
    node_labels=(("node.kubernetes.io/instance-type", "p5.48xlarge"),),
    tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists"),),
)
# Labelled under a different key than the others: pinning must not rely on a shared key.
L4 = FlavorSpec(
    name="l4",
    gpu_model="L4",
    accelerator_type="L4",
    gpu_memory_gib=24,
    gpus_per_node=8,
    node_labels=(("nvidia.com/gpu.product", "NVIDIA-L4"),),
)
PLATFORM = PlatformSpec()


def tenant(*quotas: tuple[FlavorSpec, int], cohort: str = "") -> TenantQueueSpec:
    return TenantQueueSpec(
        tenant_slug="acme",
        namespace="acme",
        cluster_queue="tenant-acme",
        local_queue="acme",
        cohort=cohort,
        quotas=tuple(FlavorQuotaSpec(flavor=f, nominal_gpus=n) for f, n in sorted(quotas, key=lambda q: q[0].name)),
    )


def deployment(flavor: FlavorSpec, *, backend: str = "kuberay", **changes) -> DeploymentSpec:
    spec = DeploymentSpec(
        deployment_id=1,
        name="chat",
        namespace="acme",
        tenant_slug="acme",
        queue_name="acme",
        model_source="org/model",
        served_model_name="chat",
        flavor=flavor,
        backend=backend,
    )
    return replace(spec, **changes)


def render(spec: DeploymentSpec, platform: PlatformSpec = PLATFORM) -> dict:
    if spec.backend == "kserve":
        return render_inferenceservice(spec, platform)
    return render_rayservice(spec, platform)


def cluster_objects(queue: TenantQueueSpec, platform: PlatformSpec = PLATFORM) -> tuple[dict, list[dict]]:
    """The ClusterQueue and every ResourceFlavor the sync applies for `queue`."""
    flavors = [kueue_manifests.render_resource_flavor(q.flavor) for q in queue.quotas]
    flavors.append(kueue_manifests.render_cpu_resource_flavor(platform))
    return kueue_manifests.render_cluster_queue(queue, platform), flavors


def full(flavor: FlavorSpec, queue: TenantQueueSpec) -> dict:
    """Usage that fills `flavor`'s GPU quota in `queue`."""
    nominal = next(q.nominal_gpus for q in queue.quotas if q.flavor == flavor)
    return {(flavor.name, GPU): nominal}


BACKENDS = ["kuberay", "kserve"]


class TestGpuPodsAreChargedToTheirOwnFlavor:
    @pytest.mark.parametrize("backend", BACKENDS)
    def test_an_h100_deployment_is_admitted_into_h100_although_a100_comes_first(self, backend):
        queue = tenant((A100, 4), (H100, 8))
        cq, flavors = cluster_objects(queue)
        spec = deployment(H100, backend=backend, tensor_parallel_size=2)
        assignment = admit(cq, flavors, render(spec))
        assert assignment is not None
        gpu_sets = [name for name, by_resource in assignment.items() if GPU in by_resource]
        assert gpu_sets and all(assignment[name][GPU] == "h100-sxm5" for name in gpu_sets)

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_with_h100_full_it_stays_pending_rather_than_take_another_flavor(self, backend):
        queue = tenant((A100, 4), (H100, 8), (L4, 8))
        cq, flavors = cluster_objects(queue)
        spec = deployment(H100, backend=backend)
        assert admit(cq, flavors, render(spec), usage=full(H100, queue)) is None

    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("flavor", [A100, H100, L4], ids=lambda f: f.name)
    def test_every_flavor_is_pinned_whichever_else_has_room(self, backend, flavor):
        queue = tenant((A100, 4), (H100, 8), (L4, 8))
        cq, flavors = cluster_objects(queue)
        spec = deployment(flavor, backend=backend)
        assignment = admit(cq, flavors, render(spec))
        assert assignment is not None
        assert {by[GPU] for by in assignment.values() if GPU in by} == {flavor.name}
        assert admit(cq, flavors, render(spec), usage=full(flavor, queue)) is None

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_a_gpu_flavor_without_labels_of_its_own_is_pinned_by_the_portal_label(self, backend):
        unlabelled = replace(A100, node_labels=())
        queue = tenant((unlabelled, 4), (H100, 8))
        cq, flavors = cluster_objects(queue)
        assert {
            by[GPU] for by in admit(cq, flavors, render(deployment(H100, backend=backend))).values() if GPU in by
        } == {"h100-sxm5"}
        assert (
            admit(cq, flavors, render(deployment(unlabelled, backend=backend)), usage=full(unlabelled, queue)) is None
        )

    def test_borrowing_stays_within_the_same_flavor(self):
        queue = replace(tenant((A100, 4), (H100, 8)), cohort="serving")
        cq, flavors = cluster_objects(queue)
        spec = deployment(H100, tensor_parallel_size=4)
        spare = {("h100-sxm5", GPU): 4, ("a100-pcie", GPU): 4}
        assignment = admit(cq, flavors, render(spec), usage=full(H100, queue), cohort_spare=spare)
        assert assignment is not None and assignment["gpu"][GPU] == "h100-sxm5"
        assert admit(cq, flavors, render(spec), usage=full(H100, queue), cohort_spare={("a100-pcie", GPU): 4}) is None


CPU_NODES = PlatformSpec(cpu_flavor_node_labels=(("node-role.example.com/cpu", "true"),))


class TestHeads:
    @pytest.mark.parametrize("platform", [PLATFORM, CPU_NODES], ids=["unlabelled", "labelled"])
    def test_the_head_is_charged_to_the_cpu_flavor_and_workers_to_their_gpu_flavor(self, platform):
        queue = tenant((A100, 4), (H100, 8))
        cq, flavors = cluster_objects(queue, platform)
        assignment = admit(cq, flavors, render(deployment(H100), platform))
        assert assignment == {
            "head": {"cpu": "portal-cpu", "memory": "portal-cpu"},
            "gpu": {GPU: "h100-sxm5", "cpu": "h100-sxm5", "memory": "h100-sxm5"},
        }

    def test_a_labelled_cpu_flavor_pins_the_head_even_when_it_is_full(self):
        queue = tenant((A100, 4), (H100, 8))
        cq, flavors = cluster_objects(queue, CPU_NODES)
        cpu_quota = next(f for f in cq["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "portal-cpu")
        used = {("portal-cpu", r["name"]): quantity(r["nominalQuota"]) for r in cpu_quota["resources"]}
        assert admit(cq, flavors, render(deployment(H100), CPU_NODES), usage=used) is None

    def test_heads_carry_no_toleration_and_select_the_cpu_nodes(self):
        head = render(deployment(H100), CPU_NODES)["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
        assert "tolerations" not in head
        assert head["nodeSelector"] == {"llm-portal.io/flavor": "portal-cpu"}  # Kueue adds the CPU flavor's labels

    @pytest.mark.parametrize("gpus", [1, 3, 8])
    def test_one_gpu_deployment_per_gpu_fits_heads_and_workers(self, gpus):
        """GPUs stay the only binding constraint: as many 1-GPU deployments as GPUs all fit."""
        queue = tenant((A100, 4), (H100, gpus))
        cq, flavors = cluster_objects(queue)
        usage: dict = {}
        workload = render(deployment(H100))
        for _ in range(gpus):
            assignment = admit(cq, flavors, workload, usage=usage)
            assert assignment is not None
            for key, cost in charged(workload, assignment).items():
                usage[key] = usage.get(key, 0) + cost
        assert admit(cq, flavors, workload, usage=usage) is None  # the next one waits for a GPU


class TestChargesMatchTheReservation:
    @pytest.mark.parametrize(
        ("backend", "changes"),
        [
            ("kuberay", {"tensor_parallel_size": 2, "min_replicas": 2, "max_replicas": 2}),
            ("kuberay", {"tensor_parallel_size": 8, "pipeline_parallel_size": 2}),
            ("kuberay", {"tensor_parallel_size": 4, "min_replicas": 1, "max_replicas": 3}),
            ("kserve", {"tensor_parallel_size": 4, "min_replicas": 2, "max_replicas": 2}),  # Standard mode: fixed
        ],
    )
    def test_gpus_charged_at_full_scale_equal_the_gpus_reserved(self, backend, changes):
        queue = tenant((A100, 4), (H100, 32))
        cq, flavors = cluster_objects(queue)
        spec = deployment(H100, backend=backend, **changes)
        workload = render(spec)
        assignment = admit(cq, flavors, workload, at_max=True)
        assert assignment is not None
        cost = charged(workload, assignment, at_max=True)
        reserved = spec.max_replicas * spec.gpus_per_replica
        assert {k: v for k, v in cost.items() if k[1] == GPU} == {("h100-sxm5", GPU): reserved}


class TestWhatTheSyncApplies:
    def test_a_reserved_h100_deployment_is_charged_its_reservation_in_h100_and_its_head_in_cpu(
        self, world, cluster_api
    ):
        """From the rows, through the sync and the renderer, to what Kueue would charge."""
        from deployments import services
        from deployments.specs import deployment_spec
        from quotas.kueue import sync_kueue
        from runtime import k8s
        from runtime.backends import traits
        from tests.support.factories import draft

        sync_kueue()
        cq = cluster_api.get_object(k8s.CLUSTERQUEUE, world.alpha.cluster_queue)
        flavor_names = [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]]
        assert flavor_names == ["portal-cpu", "a100-pcie", "h100-sxm5"]
        flavors = [cluster_api.get_object(k8s.RESOURCEFLAVOR, name) for name in flavor_names]
        assert all(flavors)

        dep = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, tensor_parallel_size=2)
        )
        dep = services.deployment_approve(
            deployment_id=dep.pk, approver=world.users["platform_admin"], revision=dep.proposed_number
        )
        workload = traits(dep.backend).preview(deployment_spec(dep))
        assignment = admit(cq, flavors, workload, at_max=True)
        assert assignment is not None and assignment["head"] == {"cpu": "portal-cpu", "memory": "portal-cpu"}
        cost = charged(workload, assignment, at_max=True)
        assert {k: v for k, v in cost.items() if k[1] == GPU} == {("h100-sxm5", GPU): dep.reserved_gpus}
        assert dep.reserved_gpus == 4
        # The unlabelled A100 flavor of the test world has room, yet it cannot take H100 pods.
        assert admit(cq, flavors, workload, usage={("h100-sxm5", GPU): 8}) is None


# ---------------------------------------------------------------------------------------------
# Topology-aware placement (tests/support/kueue_admission.place): after quota, Kueue finds nodes
# ---------------------------------------------------------------------------------------------

BLOCK, HOST = "cloud.example.com/block", "kubernetes.io/hostname"
H100_TAS = replace(H100, topology_levels=(BLOCK, HOST))


def nodes(**free_by_block: list[int]) -> list[Node]:
    """Nodes per block, each with the GPUs still free on it: nodes(a=[8, 0], b=[8, 8])."""
    return [
        Node(f"{block}{i}", {BLOCK: block, HOST: f"{block}{i}"}, free)
        for block, frees in free_by_block.items()
        for i, free in enumerate(frees)
    ]


def block_of(name: str) -> str:
    return name[0]


class TestTopologyAwarePlacement:
    def test_a_two_node_replica_takes_the_block_with_room_not_two_half_free_blocks(self):
        # 24 free GPUs would hold the 16-GPU replica if blocks did not matter (a0 + b0 or b1).
        workload = render(deployment(H100_TAS, tensor_parallel_size=8, pipeline_parallel_size=2))
        placement = place(workload, nodes(a=[8, 0], b=[8, 8]), [BLOCK, HOST])
        assert placement == {"gpu": [["b0", "b1"]]}

    def test_with_no_single_block_holding_the_replica_it_stays_pending(self):
        workload = render(deployment(H100_TAS, tensor_parallel_size=8, pipeline_parallel_size=2))
        assert place(workload, nodes(a=[8, 0], b=[0, 8], c=[8]), [BLOCK, HOST]) is None

    def test_each_replica_of_a_group_gets_its_own_block_but_never_spans_two(self):
        spec = deployment(H100_TAS, tensor_parallel_size=8, pipeline_parallel_size=2, min_replicas=2, max_replicas=2)
        placement = place(render(spec), nodes(a=[8, 8], b=[8, 8]), [BLOCK, HOST])
        assert placement is not None and len(placement["gpu"]) == 2
        assert all(len({block_of(n) for n in replica}) == 1 for replica in placement["gpu"])

    def test_single_node_replicas_each_take_one_host_wherever_there_is_room(self):
        spec = deployment(H100_TAS, tensor_parallel_size=8, min_replicas=2, max_replicas=2)
        placement = place(render(spec), nodes(a=[8, 0], b=[0, 8]), [BLOCK, HOST])
        assert placement == {"gpu": [["a0"], ["b1"]]}
        # A host with 4 free GPUs cannot take an 8-GPU replica even though a block has 8 free.
        assert place(render(spec), nodes(a=[4, 4], b=[8]), [BLOCK, HOST]) is None

    def test_a_kserve_predictor_pod_is_placed_on_one_host(self):
        spec = deployment(H100_TAS, backend="kserve", tensor_parallel_size=4, min_replicas=2, max_replicas=2)
        placement = place(render(spec), nodes(a=[4, 2], b=[4]), [BLOCK, HOST], at_max=True)
        assert placement == {"predictor": [["a0"], ["b0"]]}

    def test_without_topology_levels_no_placement_is_asked_for(self):
        workload = render(deployment(H100, tensor_parallel_size=8, pipeline_parallel_size=2))
        assert place(workload, nodes(a=[8], b=[8]), [BLOCK, HOST]) == {}

    @settings(max_examples=200, deadline=None)
    @given(
        frees=st.dictionaries(
            st.sampled_from("abcd"), st.lists(st.sampled_from([0, 4, 8]), min_size=1, max_size=4), min_size=1
        ),
        replicas=st.integers(min_value=1, max_value=3),
    )
    def test_a_multi_node_replica_never_spans_blocks_and_waits_only_when_no_block_has_room(self, frees, replicas):
        spec = deployment(
            H100_TAS, tensor_parallel_size=8, pipeline_parallel_size=2, min_replicas=replicas, max_replicas=replicas
        )
        layout = nodes(**frees)
        placement = place(render(spec), layout, [BLOCK, HOST])
        full_hosts = {block: sum(1 for f in fs if f == 8) for block, fs in frees.items()}
        if placement is None:
            # Pending only when the blocks cannot hold every replica whole (8-GPU hosts, 2 per replica).
            assert sum(n // 2 for n in full_hosts.values()) < replicas
        else:
            assert len(placement["gpu"]) == replicas
            for replica in placement["gpu"]:
                assert len(replica) == 2 and len({block_of(n) for n in replica}) == 1
            used = [n for replica in placement["gpu"] for n in replica]
            assert len(used) == len(set(used))  # one 8-GPU pod per 8-GPU host
