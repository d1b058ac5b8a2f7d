"""Quota rows turned into the runtime's frozen specs (flavors, tenant queues)."""

from __future__ import annotations

from quotas.models import GpuFlavor, Tenant
from runtime.spec import FlavorQuotaSpec, FlavorSpec, TenantQueueSpec, Toleration


def flavor_spec(flavor: GpuFlavor) -> FlavorSpec:
    tolerations = tuple(
        Toleration(
            key=t.get("key", ""),
            operator=t.get("operator", "Equal"),
            value=t.get("value", ""),
            effect=t.get("effect", "NoSchedule"),
        )
        for t in (flavor.tolerations or [])
    )
    return FlavorSpec(
        name=flavor.name,
        gpu_model=flavor.gpu_model,
        accelerator_type=flavor.accelerator_type,
        gpu_memory_gib=flavor.gpu_memory_gib,
        gpus_per_node=flavor.gpus_per_node,
        cpu_per_gpu=flavor.cpu_per_gpu,
        memory_gib_per_gpu=flavor.memory_gib_per_gpu,
        node_labels=tuple(sorted((flavor.node_labels or {}).items())),
        tolerations=tolerations,
        topology_levels=tuple(flavor.topology_levels or ()),
    )


def tenant_queue_spec(tenant: Tenant) -> TenantQueueSpec:
    quotas = tuple(
        FlavorQuotaSpec(
            flavor=flavor_spec(q.flavor),
            nominal_gpus=q.nominal_gpus,
            borrowing_limit_gpus=q.borrowing_limit_gpus,
            lending_limit_gpus=q.lending_limit_gpus,
        )
        for q in tenant.quotas.select_related("flavor").order_by("flavor__name")
    )
    return TenantQueueSpec(
        tenant_slug=tenant.slug,
        namespace=tenant.namespace,
        cluster_queue=tenant.cluster_queue,
        local_queue=tenant.local_queue,
        cohort=tenant.effective_cohort,
        quotas=quotas,
    )
