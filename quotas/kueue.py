"""Kueue sync: mirror tenants' quotas as Namespace (and its model-cache claim, quotas.model_cache),
ResourceFlavors (each GPU flavor and the platform's CPU flavor for Ray heads), Cohort, ClusterQueue
and LocalQueue objects, and read ClusterQueue status back for the admin view. Idempotent."""

from __future__ import annotations

import logging

from django.utils import timezone

from quotas.model_cache import sync_model_cache
from quotas.models import GpuFlavor, PriorityTier, Tenant
from quotas.nodepools import sync_nodepools, sync_topologies
from quotas.specs import flavor_spec, tenant_queue_spec
from runtime import k8s
from runtime.backends import get_cluster
from runtime.backends.base import digest
from runtime.manifests.common import ANNOTATION_SPEC_HASH, GPU_RESOURCE, portal_labels
from runtime.manifests.kueue import (
    render_cluster_queue,
    render_cohort,
    render_cpu_resource_flavor,
    render_local_queue,
    render_namespace,
    render_resource_flavor,
    render_workload_priority_class,
    resource_flavor_update_problem,
)
from runtime.platform import platform_spec
from runtime.spec import PriorityClassSpec

log = logging.getLogger(__name__)


def _apply_if_changed(cluster: k8s.Cluster, obj: dict, current: dict | None = None) -> bool:
    """Apply only when our rendering changed since the last apply (no write when in sync).
    `current`: the object as already read from the cluster (read here when None)."""
    obj = {**obj, "metadata": {**obj["metadata"]}}
    wanted = digest({k: v for k, v in obj.items() if k != "status"})
    obj["metadata"]["annotations"] = {**(obj["metadata"].get("annotations") or {}), ANNOTATION_SPEC_HASH: wanted}
    kind = k8s.kind_of(obj)
    if current is None:
        current = cluster.get(kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))
    if current and ((current.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_SPEC_HASH) == wanted:
        return False
    cluster.apply(obj)
    return True


def sync_kueue(*, tenant_id: int | None = None) -> int:
    """Apply the Kueue objects of one tenant (or all); returns how many objects were written."""
    cluster = get_cluster()
    platform = platform_spec()
    tenants = Tenant.objects.all() if tenant_id is None else Tenant.objects.filter(pk=tenant_id)
    # The CPU flavor first: every ClusterQueue lists it, and one naming a missing flavor is inactive.
    written = sync_topologies(cluster, _apply_if_changed)  # before the flavors that name them
    written += _apply_if_changed(cluster, render_cpu_resource_flavor(platform))
    written += sync_priority_classes(cluster)  # before any deployment names one
    for flavor in GpuFlavor.objects.filter(active=True):
        written += _apply_resource_flavor(cluster, flavor)
    cohorts = set()
    for tenant in tenants:
        spec = tenant_queue_spec(tenant)
        if spec.cohort not in cohorts:
            cohorts.add(spec.cohort)
            written += _apply_if_changed(cluster, render_cohort(spec.cohort))
        written += _apply_if_changed(cluster, render_namespace(spec))
        if tenant.namespace_created is None:  # from now on the slug names a cluster object: fixed
            Tenant.objects.filter(pk=tenant.pk, namespace_created__isnull=True).update(namespace_created=timezone.now())
        written += sync_model_cache(cluster, tenant)  # in the namespace, before any engine pod mounts it
        for obj in (render_cluster_queue(spec, platform), render_local_queue(spec)):
            written += _apply_if_changed(cluster, obj)
        read_cluster_queue_status(cluster, tenant)
    # Last: a pool's GPU limit follows the quotas, and a missing Karpenter must not hold up the queues.
    return written + sync_nodepools(cluster, _apply_if_changed)


def sync_priority_classes(cluster: k8s.Cluster) -> int:
    """One WorkloadPriorityClass per priority tier; the portal's classes of tiers no longer there
    are deleted (a tier is deleted only when no deployment names it: quotas.tiers)."""
    wanted = {tier.class_name: tier for tier in PriorityTier.objects.all()}
    written = 0
    for name, tier in wanted.items():
        spec = PriorityClassSpec(name=name, value=tier.value, description=tier.description)
        written += _apply_if_changed(cluster, render_workload_priority_class(spec))
    for obj in cluster.list(k8s.WORKLOADPRIORITYCLASS, None, label_selector=portal_labels()):
        if obj["metadata"]["name"] not in wanted:
            cluster.delete(k8s.WORKLOADPRIORITYCLASS, obj["metadata"]["name"], None)
            written += 1
    return written


def _apply_resource_flavor(cluster: k8s.Cluster, flavor: GpuFlavor) -> bool:
    """Apply the flavor's ResourceFlavor unless Kueue would refuse it forever (node labels or
    tolerations of one with a topologyName); record why on the flavor, or clear it when in sync."""
    obj = render_resource_flavor(flavor_spec(flavor))
    current = cluster.get(k8s.RESOURCEFLAVOR, flavor.name)
    problem = resource_flavor_update_problem(current, obj)
    if problem:
        # Not retried, not raised: the rest of the sync (other flavors, the queues) must go on.
        log.error("%s", problem)
    written = False if problem else _apply_if_changed(cluster, obj, current)
    if flavor.kueue_problem != problem:
        GpuFlavor.objects.filter(pk=flavor.pk).update(kueue_problem=problem)
    return written


def read_cluster_queue_status(cluster: k8s.Cluster, tenant: Tenant) -> dict:
    """Store the ClusterQueue's flavorsUsage / pendingWorkloads / admittedWorkloads on the tenant."""
    obj = cluster.get(k8s.CLUSTERQUEUE, tenant.cluster_queue)
    status = (obj or {}).get("status") or {}
    usage = {}
    for flavor in status.get("flavorsUsage") or []:
        for resource in flavor.get("resources") or []:
            if resource.get("name") == GPU_RESOURCE:
                usage[flavor.get("name")] = {
                    "total": str(resource.get("total", "0")),
                    "borrowed": str(resource.get("borrowed", "0")),
                }
    summary = {
        "found": obj is not None,
        "pending_workloads": status.get("pendingWorkloads", 0),
        "admitted_workloads": status.get("admittedWorkloads", 0),
        "reserving_workloads": status.get("reservingWorkloads", 0),
        "gpu_usage": usage,
        "read_at": timezone.now().isoformat(),
    }
    Tenant.objects.filter(pk=tenant.pk).update(kueue_status=summary)
    return summary
