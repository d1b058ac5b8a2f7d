"""The Kueue objects of a tenant: namespace, ResourceFlavors, Cohort, ClusterQueue, LocalQueue.

Functions of frozen specs (`runtime.spec`) and nothing else: no ORM, no I/O, no `kubernetes`
import. `quotas.kueue` applies what these return; the tests compare them with golden files and
validate them against the real CRD schemas in ../shared.

Flavors (docs/scheduling.md, "Flavors and queues"): Kueue charges each pod set to the first flavor of the
ClusterQueue, in list order, that has room and whose node labels the pod does not rule out.
The ClusterQueue has one resource group covering GPUs, CPU and memory. Its first flavor is
the platform's CPU flavor (`PlatformSpec.cpu_flavor`, no GPUs): Ray heads, which request no
GPU, land there and never take a GPU flavor's CPU or memory. Then the tenant's GPU flavors,
each sized for its workers only. Every flavor, the CPU flavor included, carries the portal's
node label `llm-portal.io/flavor: <its name>` (common.LABEL_FLAVOR) besides its own labels, and
every pod the portal renders selects that one label, so no other flavor can admit it whatever
label keys the flavors use (common.gpu_node_selector says why). Why not a second resource
group for CPU and memory: a pod set gets one flavor per group and Kueue injects the labels of
every flavor it got, so GPU workers would carry the CPU flavor's node labels too and their CPU
and memory would be charged to it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from runtime.manifests.common import (
    GPU_RESOURCE,
    cpu_flavor_node_labels,
    flavor_node_labels,
    portal_labels,
    toleration,
)
from runtime.manifests.topology import KUEUE_API_VERSION as KUEUE_API_VERSION  # defined there
from runtime.manifests.topology import topology_name
from runtime.spec import FlavorQuotaSpec, FlavorSpec, PlatformSpec, PriorityClassSpec, TenantQueueSpec

# Order matters: Kueue requires every flavor to list its resources in coveredResources order.
COVERED_RESOURCES = (GPU_RESOURCE, "cpu", "memory")

_QUANTITY = re.compile(r"^(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<suffix>[a-zA-Z]*)$")
_BINARY_SUFFIX = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_DECIMAL_SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}


# ---------------------------------------------------------------------------------------------
# Quantities
# ---------------------------------------------------------------------------------------------


def _cpu_millis(quantity: str | int) -> int:
    """A CPU quantity ("2", "500m", 4) in millicores."""
    text = str(quantity)
    if text.endswith("m"):
        return int(text[:-1])
    return round(float(text) * 1000)


def _memory_bytes(quantity: str | int) -> int:
    """A memory quantity ("8Gi", "512Mi", "1G", 1024) in bytes."""
    match = _QUANTITY.match(str(quantity))
    if match is None:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    number, suffix = float(match["number"]), match["suffix"]
    if suffix in _BINARY_SUFFIX:
        return round(number * _BINARY_SUFFIX[suffix])
    if suffix in _DECIMAL_SUFFIX:
        return round(number * _DECIMAL_SUFFIX[suffix])
    raise ValueError(f"unknown memory suffix in {quantity!r}")


def _cpu_quantity(millis: int) -> int | str:
    """Whole cores as an int (how people write them), otherwise millicores."""
    return millis // 1000 if millis % 1000 == 0 else f"{millis}m"


def _memory_quantity(num_bytes: int) -> str:
    """Gi where exact (the unit pods request in), so quotas read like what they must cover."""
    for suffix in ("Gi", "Mi", "Ki"):
        unit = _BINARY_SUFFIX[suffix]
        if num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)


# ---------------------------------------------------------------------------------------------
# Objects
# ---------------------------------------------------------------------------------------------


def render_namespace(spec: TenantQueueSpec) -> dict[str, Any]:
    """The tenant's namespace, labelled as the portal's."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": spec.namespace, "labels": portal_labels(spec.tenant_slug)},
    }


def render_resource_flavor(flavor: FlavorSpec) -> dict[str, Any]:
    """The Kueue ResourceFlavor for one GPU flavor.

    `nodeLabels` (the flavor's own plus `llm-portal.io/flavor: <name>`, common.flavor_node_labels)
    and `tolerations` are what Kueue injects into admitted pods. Once `topologyName` is set, Kueue
    refuses any change of `nodeLabels` or `tolerations` (CEL rules in kubernetes-sigs/kueue v0.19.2,
    apis/kueue/v1beta2/resourceflavor_types.go); quotas.kueue checks before it applies.
    """
    spec: dict[str, Any] = {"nodeLabels": flavor_node_labels(flavor)}
    if flavor.tolerations:
        spec["tolerations"] = [toleration(t) for t in flavor.tolerations]
    if flavor.topology_levels:  # Kueue refuses it without node labels: there always are some
        spec["topologyName"] = topology_name(flavor)
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor.name, "labels": portal_labels()},
        "spec": spec,
    }


def render_cpu_resource_flavor(platform: PlatformSpec) -> dict[str, Any]:
    """The CPU-only ResourceFlavor that Ray heads are charged to (`platform.cpu_flavor`).

    Always labelled: `llm-portal.io/flavor: <its name>`, which heads select, plus the platform's
    KUEUE_CPU_NODE_LABELS; Kueue injects them all. It has no tolerations, so heads stay off the
    tainted GPU nodes. Raises ValueError for more labels than a ResourceFlavor holds.
    """
    spec: dict[str, Any] = {"nodeLabels": cpu_flavor_node_labels(platform)}
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": platform.cpu_flavor, "labels": portal_labels()},
        "spec": spec,
    }


# Kueue keeps these of a ResourceFlavor once its topologyName is set: CEL rules "nodeLabels are
# immutable when topologyName is set" and the same for tolerations (kubernetes-sigs/kueue v0.19.2,
# apis/kueue/v1beta2/resourceflavor_types.go), so the API server refuses such a patch every time.
# Kueue's main branch allows both changes (kueue#13622, kueue#13738; in no release yet): relax this
# when the platform moves to a Kueue that has them.
FIXED_WITH_TOPOLOGY = ("nodeLabels", "tolerations")


def resource_flavor_update_problem(current: dict[str, Any] | None, wanted: dict[str, Any]) -> str:
    """Why applying `wanted` over the cluster's `current` ResourceFlavor would be refused forever,
    or "" when it may be applied (no object yet, no topologyName, or nothing fixed changes).

    Deleting and recreating the flavor is not done for the admin: Kueue would drop it from every
    ClusterQueue while admitted workloads are charged to it.
    """
    spec = (current or {}).get("spec") or {}
    if not spec.get("topologyName"):
        return ""
    changed = [f for f in FIXED_WITH_TOPOLOGY if (spec.get(f) or None) != (wanted["spec"].get(f) or None)]
    if not changed:
        return ""
    name = wanted["metadata"]["name"]
    fields = " and ".join(
        f"{f} (on the cluster {spec.get(f) or 'none'}, wanted {wanted['spec'].get(f) or 'none'})" for f in changed
    )
    return (
        f"ResourceFlavor {name} has topologyName {spec['topologyName']}, and Kueue refuses changes to its "
        f"{fields}, so the portal does not apply it. Until it does, pods of other flavors may be admitted on it. "
        f"Recreating it is not safe while admitted workloads use it: stop the deployments on {name}, "
        f"then delete the ResourceFlavor (kubectl delete resourceflavor {name}); the next sync recreates it."
    )


def _head_overhead(platform: PlatformSpec) -> tuple[int, int]:
    """(millicores, bytes) one RayService head pod adds to a Workload at most: the head, plus the
    autoscaler sidecar when the deployment autoscales (runtime.manifests.rayservice)."""
    return (
        _cpu_millis(platform.head_cpu) + _cpu_millis(platform.autoscaler_cpu),
        _memory_bytes(platform.head_memory) + _memory_bytes(platform.autoscaler_memory),
    )


def _cpu_flavor_quota(spec: TenantQueueSpec, platform: PlatformSpec) -> dict[str, Any]:
    """The CPU flavor's [gpu, cpu, memory] quotas: no GPUs, one head pod per nominal GPU.

    Every deployment takes at least one GPU, so a tenant runs at most one head per GPU it
    holds; heads for all its nominal GPUs keep GPUs the only binding constraint. GPUs
    borrowed in the cohort bring their heads' CPU and memory along the same way: the CPU
    flavor may borrow what other tenants' heads leave unused (no limits are set).
    """
    head_millis, head_bytes = _head_overhead(platform)
    heads = sum(q.nominal_gpus for q in spec.quotas)
    return {
        "name": platform.cpu_flavor,
        "resources": [
            {"name": GPU_RESOURCE, "nominalQuota": 0},
            {"name": "cpu", "nominalQuota": _cpu_quantity(heads * head_millis)},
            {"name": "memory", "nominalQuota": _memory_quantity(heads * head_bytes)},
        ],
    }


def _flavor_quota(quota: FlavorQuotaSpec, *, in_cohort: bool) -> dict[str, Any]:
    """One GPU flavor's [gpu, cpu, memory] quotas, in COVERED_RESOURCES order.

    CPU and memory follow the GPUs: the flavor's per-GPU share of a node, exactly what the
    workers request, so GPUs stay the only binding constraint. Heads are charged to the CPU
    flavor, not here.
    """
    flavor = quota.flavor

    def cpu(gpus: int) -> int | str:
        return _cpu_quantity(gpus * flavor.cpu_per_gpu * 1000)

    def memory(gpus: int) -> str:
        return _memory_quantity(gpus * flavor.memory_gib_per_gpu * 2**30)

    def resource(name: str, convert: Callable[[int], int | str]) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": name, "nominalQuota": convert(quota.nominal_gpus)}
        # Kueue rejects borrowing/lending limits on a ClusterQueue without a cohort.
        if in_cohort and quota.borrowing_limit_gpus is not None:
            entry["borrowingLimit"] = convert(quota.borrowing_limit_gpus)
        if in_cohort and quota.lending_limit_gpus is not None:
            entry["lendingLimit"] = convert(quota.lending_limit_gpus)
        return entry

    return {
        "name": flavor.name,
        "resources": [
            resource(GPU_RESOURCE, int),
            resource("cpu", cpu),
            resource("memory", memory),
        ],
    }


def render_cluster_queue(spec: TenantQueueSpec, platform: PlatformSpec | None = None) -> dict[str, Any]:
    """The tenant's ClusterQueue: the CPU flavor for heads, then GPU quota per flavor, in the
    tenant's borrowing cohort (the module docstring says why in this order, in one group).

    Preemption is the platform's (`platform.reclaim_within_cohort`, `platform.within_cluster_queue`;
    by default a tenant reclaims its own nominal quota from borrowers regardless of priority,
    `Any`, and inside its queue a higher-priority deployment may displace a lower one,
    `LowerPriority`); runtime.preemption says what each value implies and why every pair is valid.
    `platform` names the CPU flavor and the head pod size (defaults apply when omitted).
    Raises ValueError when a GPU flavor has the CPU flavor's name.
    """
    platform = platform or PlatformSpec()
    if any(q.flavor.name == platform.cpu_flavor for q in spec.quotas):
        raise ValueError(f"GPU flavor {platform.cpu_flavor!r} has the name of the CPU flavor (KUEUE_CPU_FLAVOR)")
    in_cohort = bool(spec.cohort)
    cq_spec: dict[str, Any] = {
        # Only the tenant's own namespace may submit to its queue. The API server sets
        # kubernetes.io/metadata.name itself, so no one can relabel their way in.
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": spec.namespace}},
        # BestEffortFIFO (default): a large pending deployment does not block smaller ones
        # that fit. StrictFIFO: admission in order, so a large one is never starved.
        "queueingStrategy": platform.queueing_strategy,
        # No borrowWithinCohort (its policy stays Never): Kueue's CEL refuses one other than Never
        # beside reclaimWithinCohort Never, so with it left out every pair of settings is valid.
        "preemption": {
            "reclaimWithinCohort": platform.reclaim_within_cohort,
            "withinClusterQueue": platform.within_cluster_queue,
        },
    }
    if spec.quotas:
        cq_spec["resourceGroups"] = [
            {
                "coveredResources": list(COVERED_RESOURCES),
                "flavors": [
                    _cpu_flavor_quota(spec, platform),
                    *(_flavor_quota(q, in_cohort=in_cohort) for q in spec.quotas),
                ],
            }
        ]
    if in_cohort:
        cq_spec["cohortName"] = spec.cohort
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": spec.cluster_queue, "labels": portal_labels(spec.tenant_slug)},
        "spec": cq_spec,
    }


def render_local_queue(spec: TenantQueueSpec) -> dict[str, Any]:
    """The LocalQueue in the tenant namespace that RayServices name in their queue label."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {
            "name": spec.local_queue,
            "namespace": spec.namespace,
            "labels": portal_labels(spec.tenant_slug),
        },
        "spec": {"clusterQueue": spec.cluster_queue},
    }


def render_cohort(name: str) -> dict[str, Any]:
    """A Kueue Cohort object for `name`.

    ClusterQueues share quota by naming the same cohort even without this object; creating
    it makes the cohort visible (status, fair sharing) and gives a place for shared quota.
    """
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Cohort",
        "metadata": {"name": name, "labels": portal_labels()},
        "spec": {},
    }


def render_workload_priority_class(spec: PriorityClassSpec) -> dict[str, Any]:
    """A priority tier as Kueue's WorkloadPriorityClass: a workload labelled
    `kueue.x-k8s.io/priority-class: <name>` (common.kueue_labels) gets `value` as its priority, which
    orders admission in its ClusterQueue and, with `withinClusterQueue: LowerPriority`, lets it
    preempt lower ones there. Kueue reads the value when it creates the Workload: a changed value
    reaches a deployment's next Workload, not the one it has (the CRD's description says so)."""
    obj: dict[str, Any] = {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": spec.name, "labels": portal_labels()},
        "value": spec.value,
    }
    if spec.description:
        obj["description"] = spec.description
    return obj
