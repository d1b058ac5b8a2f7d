"""A cluster set up as the portal needs (the readiness page all green), on the API test server:
each readiness test then breaks one thing."""

from __future__ import annotations

from runtime import k8s
from tests.support.k8s.server import K8sApiServer

KUEUE_CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
integrations:
  frameworks:
  - "batch/job"
  - "ray.io/rayservice"
  - "ray.io/raycluster"
"""
H100_LABELS = {"node.kubernetes.io/instance-type": "p5.48xlarge"}  # the world's H100 flavor
A100_LABELS = {"gpu.example.com/model": "a100"}


def node(name: str, labels: dict, gpus: int, taints: list | None = None) -> dict:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96"}},
    }


def set_up_for_the_portal(api: K8sApiServer, world, settings, prometheus_url: str) -> None:
    """Kueue's visibility API and configuration, GPU nodes for both world flavors (the A100 flavor
    gets labels), the model-cache claim bound in each tenant namespace, and Prometheus."""
    settings.PROMETHEUS_URL = prometheus_url
    settings.MODEL_CACHE_PVC = "model-cache"
    world.a100.node_labels = A100_LABELS
    world.a100.save()
    api.declare("visibility.kueue.x-k8s.io/v1beta1/clusterqueues", "ClusterQueue", namespaced=False)
    api.put(
        k8s.CONFIGMAP,
        {
            "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
            "data": {"controller_manager_config.yaml": KUEUE_CONFIG},
        },
    )
    gpu_taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    api.put(k8s.NODE, node("p5-0", H100_LABELS, 8, gpu_taint))
    api.put(k8s.NODE, node("a100-0", A100_LABELS, 4))
    api.put(k8s.NODE, node("cpu-0", {"kubernetes.io/os": "linux"}, 0))
    for namespace in ("alpha", "beta"):
        api.put(k8s.PVC, {"metadata": {"name": "model-cache", "namespace": namespace}, "status": {"phase": "Bound"}})
