"""A cluster set up as the portal needs (the readiness page all green), on the API test server:
each readiness test then breaks one thing."""

from __future__ import annotations

import json
from typing import Any

from runtime import k8s
from runtime.k8s.kinds import CRD, DEPLOYMENT
from runtime.manifests.kserve import PORTAL_ANNOTATIONS
from runtime.versions import VERSIONS
from tests.support.k8s.operating import Refused
from tests.support.k8s.server import K8sApiServer

KUEUE_CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
integrations:
  frameworks:
  - "batch/job"
  - "ray.io/rayservice"
  - "ray.io/raycluster"
  - "pod"
  - "deployment"
"""
H100_LABELS = {"node.kubernetes.io/instance-type": "p5.48xlarge"}  # the world's H100 flavor
A100_LABELS = {"gpu.example.com/model": "a100"}
CPU_LABELS = {"node-role.example.com/cpu": "true"}
IN_USE = "kueue.x-k8s.io/resource-in-use"
WEBHOOK_DOWN = (
    'Internal error occurred: failed calling webhook "mresourceflavor.kb.io": failed to call webhook: '
    'Post "https://kueue-webhook-service.kueue-system.svc:443/mutate-kueue-x-k8s-io-v1beta2-resourceflavor": '
    "connect: connection refused"
)


def kueue_webhooks(api: K8sApiServer, *, running: bool = True, rayservice: bool = True) -> None:
    """Stand-ins for Kueue's mutating webhooks on dry-run creates: the ResourceFlavor webhook adds
    its finalizer (kubernetes-sigs/kueue pkg/webhooks/resourceflavor_webhook.go); the RayService
    one suspends a RayService with a queue name when ray.io/rayservice is enabled, and is a no-op
    otherwise (jobframework's noop webhook). `running=False`: Kueue is down, and its
    failurePolicy Fail webhooks refuse the create."""

    def add_finalizer(obj: dict[str, Any]) -> dict[str, Any]:
        if not running:
            raise Refused(500, WEBHOOK_DOWN)
        obj.setdefault("metadata", {}).setdefault("finalizers", []).append(IN_USE)
        return obj

    def suspend(obj: dict[str, Any]) -> dict[str, Any]:
        if not running:
            raise Refused(500, WEBHOOK_DOWN.replace("mresourceflavor", "mrayservice"))
        if rayservice and "kueue.x-k8s.io/queue-name" in (obj["metadata"].get("labels") or {}):
            obj["spec"]["rayClusterConfig"]["suspend"] = True
        return obj

    hooks = {k8s.RESOURCEFLAVOR.key: add_finalizer, k8s.RAYSERVICE.key: suspend}
    api.call(lambda: api.emulator.admission.update(hooks))


def controller(image: str, available: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "kueue-controller-manager", "namespace": "kueue-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "manager", "image": image}]}}},
        "status": {"replicas": 1, "availableReplicas": available},
    }


def crd(name: str, version: str | None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/version": version} if version else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": {}}


def cluster_queue(name: str, gpus: dict[str, int]) -> dict[str, Any]:
    """A ClusterQueue as the portal renders it: the CPU flavor (no GPUs), then GPU quota per flavor."""
    flavors = [{"name": "portal-cpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 0}]}]
    flavors += [{"name": f, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": n}]} for f, n in gpus.items()]
    return {"metadata": {"name": name}, "spec": {"resourceGroups": [{"flavors": flavors}]}}


def flavor(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeLabels": labels} if labels else {}}


def node(name: str, labels: dict, gpus: int, taints: list | None = None) -> dict:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints or []},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96"}},
    }


def set_up_for_the_portal(api: K8sApiServer, world, settings, prometheus_url: str) -> None:
    """Kueue's visibility API, configuration, Deployment (the tested version, running) and
    webhooks; KubeRay's and KServe's CRDs labelled with their tested versions; GPU nodes for both
    world flavors (the A100 flavor gets labels) and a CPU node; ClusterQueues whose GPU quota the
    nodes hold and their ResourceFlavors; the model-cache claim bound in each tenant namespace;
    and Prometheus."""
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
    # KServe's ConfigMap keeping the portal's annotations off the predictor's pods (docs/install.md).
    api.put(
        k8s.CONFIGMAP,
        {
            "metadata": {"name": "inferenceservice-config", "namespace": "kserve"},
            "data": {"inferenceService": json.dumps({"serviceAnnotationDisallowedList": list(PORTAL_ANNOTATIONS)})},
        },
    )
    gpu_taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    api.put(k8s.NODE, node("p5-0", H100_LABELS, 8, gpu_taint))
    api.put(k8s.NODE, node("a100-0", A100_LABELS, 4))
    api.put(k8s.NODE, node("cpu-0", {"kubernetes.io/os": "linux", **CPU_LABELS}, 0))
    api.declare("visibility.kueue.x-k8s.io/v1beta2/clusterqueues", "ClusterQueue", namespaced=False)
    api.put(DEPLOYMENT, controller(f"registry.k8s.io/kueue/kueue:v{VERSIONS['kueue'].tested}"))
    kueue_webhooks(api)
    api.put(CRD, crd("rayservices.ray.io", VERSIONS["kuberay"].tested))
    api.put(CRD, crd("inferenceservices.serving.kserve.io", VERSIONS["kserve"].tested))
    for name, labels in (("portal-cpu", CPU_LABELS), ("h100-sxm5", H100_LABELS), ("a100-pcie", A100_LABELS)):
        api.put(k8s.RESOURCEFLAVOR, flavor(name, labels))
    api.put(k8s.CLUSTERQUEUE, cluster_queue("alpha", {"h100-sxm5": 4, "a100-pcie": 4}))
    api.put(k8s.CLUSTERQUEUE, cluster_queue("beta", {"h100-sxm5": 4}))
    for namespace in ("alpha", "beta"):
        api.put(k8s.PVC, {"metadata": {"name": "model-cache", "namespace": namespace}, "status": {"phase": "Bound"}})
