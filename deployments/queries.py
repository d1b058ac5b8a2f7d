"""Read-side helpers: turning rows into runtime specs, and the derived badge."""

from __future__ import annotations

from django.conf import settings

from deployments.choices import State
from deployments.models import ModelDeployment
from quotas.models import GpuFlavor, Tenant
from runtime.spec import (
    DeploymentSpec,
    EngineOptions,
    FlavorQuotaSpec,
    FlavorSpec,
    PlatformSpec,
    TenantQueueSpec,
    Toleration,
)


def derived_badge(dep: ModelDeployment) -> str:
    """The one-word badge: the state, or 'updating' while a newer spec is not yet converged."""
    if dep.state in (State.READY, State.DEGRADED) and dep.observed_generation < dep.generation:
        return "updating"
    ready = dep.condition("Ready")
    if dep.state == State.READY and ready and ready.get("reason") == "ScaledToZero":
        return "scaled_to_zero"
    return dep.state


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
    )


def deployment_spec(dep: ModelDeployment) -> DeploymentSpec:
    """The frozen spec the runtime renders for this deployment."""
    engine = EngineOptions(
        max_model_len=dep.max_model_len,
        gpu_memory_utilization=dep.gpu_memory_utilization,
        enable_chunked_prefill=dep.enable_chunked_prefill,
        max_num_batched_tokens=dep.max_num_batched_tokens,
        quantization=dep.quantization or None,
        dtype=dep.dtype,
    )
    return DeploymentSpec(
        deployment_id=dep.pk,
        name=dep.resource_name,
        namespace=dep.tenant.namespace,
        tenant_slug=dep.tenant.slug,
        queue_name=dep.tenant.local_queue,
        model_source=dep.model_source,
        served_model_name=dep.served_model_name or dep.name,
        flavor=flavor_spec(dep.flavor),
        tensor_parallel_size=dep.tensor_parallel_size,
        pipeline_parallel_size=dep.pipeline_parallel_size,
        min_replicas=dep.min_replicas,
        max_replicas=dep.max_replicas,
        target_ongoing_requests=dep.target_ongoing_requests,
        engine=engine,
        hf_token_secret=dep.hf_token_secret or None,
        generation=dep.generation,
        backend=dep.backend,
    )


def platform_spec() -> PlatformSpec:
    return PlatformSpec(
        ray_version=settings.RAY_VERSION,
        ray_image=settings.RAY_IMAGE,
        vllm_image=settings.VLLM_IMAGE,
        model_cache_pvc=settings.MODEL_CACHE_PVC or None,
        hf_cache_path=settings.HF_CACHE_PATH,
        nccl_debug=settings.NCCL_DEBUG,
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
