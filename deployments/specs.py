"""A deployment row turned into the frozen spec the runtime renders."""

from __future__ import annotations

from deployments.choices import State
from deployments.models import ModelDeployment
from quotas.specs import flavor_spec
from quotas.tenant_secrets import hf_token_secret
from quotas.tier_models import CLASS_PREFIX
from runtime.spec import DeploymentSpec, EngineOptions


def deployment_spec(dep: ModelDeployment) -> DeploymentSpec:
    """The frozen spec the runtime renders for this deployment.

    Choice fields are passed as plain str: a row just created from a model default still holds
    the TextChoices member (e.g. `Dtype.AUTO`) until it is read back, and `yaml.safe_dump`
    refuses enum members, so a manifest rendered from it would fail.
    """
    engine = EngineOptions(
        max_model_len=dep.max_model_len,
        gpu_memory_utilization=dep.gpu_memory_utilization,
        enable_chunked_prefill=dep.enable_chunked_prefill,
        max_num_batched_tokens=dep.max_num_batched_tokens,
        quantization=str(dep.quantization) if dep.quantization else None,
        dtype=str(dep.dtype),
        kv_cache_dtype=str(dep.kv_cache_dtype),
    )
    return DeploymentSpec(
        deployment_id=dep.pk,
        name=dep.resource_name,
        namespace=dep.tenant.namespace,
        tenant_slug=dep.tenant.slug,
        queue_name=dep.tenant.local_queue,
        model_source=dep.model_source,
        model_revision=dep.model_revision or None,
        task=str(dep.task),
        served_model_name=dep.served_model_name or dep.name,
        flavor=flavor_spec(dep.flavor),
        tensor_parallel_size=dep.tensor_parallel_size,
        pipeline_parallel_size=dep.pipeline_parallel_size,
        min_replicas=dep.min_replicas,
        max_replicas=dep.max_replicas,
        target_ongoing_requests=dep.target_ongoing_requests,
        engine=engine,
        # The deployment's own Secret, else the tenant's token set in the portal (quotas.tenant_secrets).
        hf_token_secret=dep.hf_token_secret or hf_token_secret(dep.tenant),
        generation=dep.generation,
        backend=str(dep.backend),
        tokens_per_minute=dep.tenant.tokens_per_minute,
        requests_per_minute=dep.tenant.requests_per_minute,
        priority_class=CLASS_PREFIX + dep.priority_tier if dep.priority_tier else None,
        wakeable=_wakeable(dep),
    )


def _wakeable(dep: ModelDeployment) -> bool:
    from deployments.wake import wakeable  # the policy's services sit above the specs

    return dep.state == State.STOPPED and not dep.tenant.archived and wakeable(dep)
