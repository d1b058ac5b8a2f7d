"""The platform-wide settings the renderers need (images, caches), read from Django settings."""

from __future__ import annotations

from runtime.spec import PlatformSpec


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
    )
