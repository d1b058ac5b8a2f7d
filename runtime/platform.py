"""The platform-wide settings the renderers need (images, caches), read from Django settings."""

from __future__ import annotations

from runtime.spec import GatewaySpec, NodeClassSpec, PlatformSpec


def platform_spec() -> PlatformSpec:
    from django.conf import settings

    return PlatformSpec(
        ray_version=settings.RAY_VERSION,
        ray_image=settings.RAY_IMAGE,
        vllm_image=settings.VLLM_IMAGE,
        model_cache_pvc=settings.MODEL_CACHE_PVC or None,
        hf_cache_path=settings.HF_CACHE_PATH,
        nccl_debug=settings.NCCL_DEBUG,
        cpu_flavor=settings.KUEUE_CPU_FLAVOR,
        cpu_flavor_node_labels=tuple(sorted(settings.KUEUE_CPU_NODE_LABELS.items())),
        queueing_strategy=settings.KUEUE_QUEUEING_STRATEGY,
        reclaim_within_cohort=settings.KUEUE_RECLAIM_WITHIN_COHORT,
        within_cluster_queue=settings.KUEUE_WITHIN_CLUSTER_QUEUE,
        kserve_deployment_mode=settings.KSERVE_DEPLOYMENT_MODE,
    )


def node_class_spec() -> NodeClassSpec:
    """Where provisioned flavors' nodes come from (the KARPENTER_* settings)."""
    from django.conf import settings

    return NodeClassSpec(
        aws=settings.KARPENTER_PLATFORM == "aws",
        group=settings.KARPENTER_NODE_CLASS_GROUP,
        kind=settings.KARPENTER_NODE_CLASS_KIND,
        name=settings.KARPENTER_NODE_CLASS_NAME,
        role=settings.KARPENTER_NODE_ROLE,
        subnet_tags=tuple(sorted(settings.KARPENTER_SUBNET_TAGS.items())),
        security_group_tags=tuple(sorted(settings.KARPENTER_SECURITY_GROUP_TAGS.items())),
        ami_alias=settings.KARPENTER_AMI_ALIAS,
        ami_allow_latest=settings.KARPENTER_AMI_ALLOW_LATEST,
        root_volume_gib=settings.KARPENTER_ROOT_VOLUME_GIB,
    )


def gateway_spec() -> GatewaySpec | None:
    """The platform Gateway deployments are exposed on, or None when GATEWAY_PUBLIC_URL is unset
    (no route is rendered and the cluster-internal URL is the endpoint, as before)."""
    from django.conf import settings

    if not settings.GATEWAY_PUBLIC_URL:
        return None
    return GatewaySpec(
        gateway_name=settings.GATEWAY_NAME,
        gateway_namespace=settings.GATEWAY_NAMESPACE,
        public_url=settings.GATEWAY_PUBLIC_URL.rstrip("/"),
        key_namespace=settings.API_KEY_NAMESPACE,
    )
