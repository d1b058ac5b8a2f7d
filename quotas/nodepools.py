"""Karpenter and topology sync: a NodePool (and on AWS an EC2NodeClass) per provisioned GPU
flavor, a Kueue Topology per flavor with topology levels; the portal's own such objects whose
flavor no longer asks for them are deleted. Called by the Kueue sync; idempotent (a second run
writes nothing).

The GPU limit of a pool: the most GPUs Kueue can ever admit on the flavor is the sum of the
tenants' *nominal* quotas on it — borrowing only moves unused nominal quota between tenants of a
cohort, it adds none, so nominal + borrowing would count the same GPUs twice. Karpenter counts a
limit against node capacity (a node brings all its GPUs), so the sum is rounded up to whole
nodes. An archived tenant's quotas are zero, so they count for nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db.models import Sum

from quotas.models import GpuFlavor, TenantQuota
from quotas.provisioning import topology_pool_problem
from quotas.specs import flavor_spec
from runtime import k8s
from runtime.k8s.kinds import EC2NODECLASS, NODEPOOL, TOPOLOGY
from runtime.manifests.common import GPU_RESOURCE, GPU_TAINT_KEY, LABEL_MANAGED_BY, MANAGED_BY
from runtime.manifests.karpenter import device_plugin_untolerated, render_ec2nodeclass, render_nodepool
from runtime.manifests.topology import render_topology
from runtime.platform import node_class_spec
from runtime.spec import NodeClassSpec, NodePoolSpec

log = logging.getLogger(__name__)
MANAGED = {LABEL_MANAGED_BY: MANAGED_BY}
Applier = Callable[[k8s.Cluster, dict[str, Any]], bool]


def gpu_limit(flavor: GpuFlavor) -> int:
    """The pool's `nvidia.com/gpu` limit: the nominal quotas granted on the flavor, in whole nodes."""
    nominal = TenantQuota.objects.filter(flavor=flavor).aggregate(total=Sum("nominal_gpus"))["total"] or 0
    per_node = max(flavor.gpus_per_node, 1)
    return -(-nominal // per_node) * per_node


def nodepool_spec(flavor: GpuFlavor) -> NodePoolSpec:
    """The frozen NodePool spec of a provisioned flavor (its provisioning was cleaned on save)."""
    settings = flavor.provisioning
    return NodePoolSpec(
        flavor=flavor_spec(flavor),
        gpu_limit=gpu_limit(flavor),
        capacity_types=tuple(settings.get("capacity_types") or ("on-demand",)),
        instance_types=tuple(settings.get("instance_types") or ()),
        consolidate_after=settings.get("consolidate_after") or "5m",
        expire_after=settings.get("expire_after") or "720h",
        node_class_name=settings.get("node_class") or "",
    )


def _prune(cluster: k8s.Cluster, kind: k8s.Kind, wanted: set[str]) -> int:
    """Delete the portal's objects of `kind` that nothing asks for any more (others' stay)."""
    try:
        found = cluster.list(kind, label_selector=MANAGED)
    except k8s.NotFound:  # the CRD is not installed (no Karpenter): there is nothing of ours
        return 0
    except k8s.PermanentClusterError as error:
        if error.status not in (401, 403):
            raise
        log.error("cannot list %s (upgrade charts/llm-portal for the portal's ClusterRole): %s", kind.plural, error)
        return 0
    deleted = 0
    for obj in found:
        name = obj["metadata"]["name"]
        if name not in wanted and cluster.delete(kind, name):
            log.info("deleted %s %s: its flavor no longer asks for it", kind.kind, name)
            deleted += 1
    return deleted


def _apply_each(cluster: k8s.Cluster, apply: Applier, objects: list[Callable[[], dict[str, Any]]]) -> int:
    """Apply each rendered object; one that cannot be rendered (platform settings missing), whose
    kind the cluster does not serve (Karpenter not installed) or that the portal's ClusterRole
    does not cover yet is logged and skipped, so the rest of the Kueue sync still converges."""
    written = 0
    for render in objects:
        try:
            written += apply(cluster, render())
        except (ValueError, k8s.NotFound) as error:
            log.error("node provisioning skipped an object: %s", error)
        except k8s.PermanentClusterError as error:
            if error.status not in (401, 403):
                raise
            # A ClusterRole from before node provisioning: the queues must still converge.
            log.error("node provisioning not permitted (upgrade the Helm chart charts/llm-portal): %s", error)
    return written


def sync_topologies(cluster: k8s.Cluster, apply: Applier) -> int:
    """Apply a Topology per flavor with topology levels, delete the portal's stale ones.

    Run before the ResourceFlavors: one naming a missing Topology is not usable by Kueue.
    Retired flavors keep theirs (their ResourceFlavor still names it, and Kueue does not let
    a ResourceFlavor drop its topologyName).
    """
    flavors = [f for f in GpuFlavor.objects.order_by("name") if f.topology_levels]
    written = _apply_each(cluster, apply, [lambda f=f: render_topology(flavor_spec(f)) for f in flavors])
    return written + _prune(cluster, TOPOLOGY, {f.name for f in flavors})


def sync_nodepools(cluster: k8s.Cluster, apply: Applier) -> int:
    """Apply a NodePool (and on AWS an EC2NodeClass) per provisioned flavor; delete the stale ones.

    Retired flavors keep their pool: deleting a pool makes Karpenter drain its nodes, which
    only clearing the flavor's provisioning should do.
    """
    pools = [f for f in GpuFlavor.objects.order_by("name") if f.provisioning]
    node_class: NodeClassSpec = node_class_spec()
    # Pools before their node classes: a node class change (a new AMI) drifts the nodes, and the
    # pool's disruption budget must already be there to keep them (runtime.manifests.karpenter).
    # A pool naming a node class not yet made only waits for it (NodeClassReady False,
    # "NodeClassNotFound": kubernetes-sigs/karpenter v1.14.1 pkg/controllers/nodepool/readiness).
    written = _apply_each(cluster, apply, [lambda f=f: render_nodepool(nodepool_spec(f), node_class) for f in pools])
    if node_class.aws:
        written += _apply_each(cluster, apply, [lambda f=f: render_ec2nodeclass(f.name, node_class) for f in pools])
    # Pools before their node classes: Karpenter keeps a node class while a pool names it.
    written += _prune(cluster, NODEPOOL, {f.name for f in pools})
    if node_class.aws:
        written += _prune(cluster, EC2NODECLASS, {f.name for f in pools})
    return written


def pool_summary(flavor: GpuFlavor) -> dict[str, Any] | None:
    """What the flavor page and the flavor API show of the pool: its settings, the GPU limit
    derived from the quotas, and the NodePool as the portal renders it (or why it cannot).
    None for a flavor the portal does not provision."""
    if not flavor.provisioning:
        return None
    spec = nodepool_spec(flavor)
    node_class = node_class_spec()
    try:
        manifest: dict[str, Any] | None = render_nodepool(spec, node_class)
        problem = ""
    except ValueError as error:
        manifest, problem = None, str(error)
    if not problem and node_class.aws:
        try:  # the pool's nodes need it: its problems (platform settings) are the pool's
            render_ec2nodeclass(flavor.name, node_class)
        except ValueError as error:
            problem = str(error)
    return {
        "name": flavor.name,
        "gpu_limit": spec.gpu_limit,
        "nodes_at_limit": spec.gpu_limit // max(flavor.gpus_per_node, 1),
        "capacity_types": list(spec.capacity_types),
        "instance_types": list(spec.instance_types),
        "consolidate_after": spec.consolidate_after,
        "expire_after": spec.expire_after,
        "problem": problem,
        "warnings": pool_warnings(flavor, spec),
        "manifest": manifest,
    }


def pool_warnings(flavor: GpuFlavor, spec: NodePoolSpec) -> list[str]:
    """What saves but will not work as the platform team expects: taints the NVIDIA device
    plugin does not tolerate as shipped (its nodes would have no allocatable GPUs), and topology
    levels on a flavor saved before they were refused together (quotas.provisioning)."""
    warnings = [
        f"Taint {_taint_text(taint)}: the NVIDIA device plugin's DaemonSet does not tolerate it as shipped "
        f"(only {GPU_TAINT_KEY}:NoSchedule and CriticalAddonsOnly), so these nodes would report no {GPU_RESOURCE} "
        "and no deployment would start on them. Add the toleration to the device plugin's DaemonSet (the Helm "
        "chart's `tolerations` value), or change this flavor's toleration."
        for taint in device_plugin_untolerated(spec)
    ]
    if problem := topology_pool_problem(flavor.provisioning, flavor.topology_levels):
        warnings.append(problem)
    return warnings


def _taint_text(taint: dict[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint['key']}{value}:{taint['effect']}"
