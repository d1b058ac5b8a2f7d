"""Cluster readiness for platform admins: the page and the settings, flavors and tenants the
checks in runtime.readiness need. The API view is portal.cluster_api.ClusterReadinessView."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render

from quotas.models import GpuFlavor, Tenant, is_platform_admin
from quotas.specs import flavor_spec
from runtime import k8s
from runtime.backends import enabled, get_cluster
from runtime.platform import gateway_spec
from runtime.readiness import AMBER, GREEN, RED, ReadinessConfig, readiness


def readiness_config() -> ReadinessConfig:
    gateway = gateway_spec()  # exposure on: the Gateway API and Kuadrant are required
    return ReadinessConfig(
        backends=tuple(enabled(on_cluster=True)),
        flavors=tuple(flavor_spec(f) for f in GpuFlavor.objects.filter(active=True).order_by("name")),
        namespaces=tuple(t.namespace for t in Tenant.objects.order_by("slug")),
        model_cache_pvc=settings.MODEL_CACHE_PVC or None,
        prometheus_url=settings.PROMETHEUS_URL,
        gateway_api=settings.GATEWAY_API or gateway is not None,
        kserve_mode=settings.KSERVE_DEPLOYMENT_MODE,
        kueue_config=(
            settings.KUEUE_CONFIG_NAMESPACE,
            settings.KUEUE_CONFIG_MAP,
        ),
        pools=tuple(GpuFlavor.objects.exclude(provisioning={}).order_by("name").values_list("name", flat=True)),
        topology=GpuFlavor.objects.exclude(topology_levels=[]).exists(),
        queueing_strategy=settings.KUEUE_QUEUEING_STRATEGY,
        gateway=None if gateway is None else (gateway.gateway_namespace, gateway.gateway_name),
    )


def cluster_readiness() -> dict[str, Any]:
    """{"checks": [...], "summary": worst status}; never raises for a cluster problem."""
    config = readiness_config()
    cluster = None
    if config.backends:
        try:
            cluster = get_cluster()
        except k8s.PermanentClusterError:
            cluster = None
    checks = readiness(cluster, config) if config.backends else []
    statuses = {c["status"] for c in checks}
    summary = RED if RED in statuses else AMBER if AMBER in statuses else GREEN
    return {"checks": checks, "summary": summary}


@login_required
def readiness_page(request):
    if not is_platform_admin(request.user):
        raise PermissionDenied
    return render(request, "portal/readiness.html", cluster_readiness())
