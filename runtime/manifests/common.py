"""What every rendered object shares: labels, annotations, ports, GPU resources, volumes.

One definition each, so the RayService, the InferenceService, the Kueue objects, the backends
that stamp and read them and the metrics scrape cannot drift apart. Pure: no ORM, no I/O.
"""

from __future__ import annotations

from typing import Any

from runtime.manifests.syntax import DNS1035_LABEL, DNS1123_LABEL  # noqa: F401 (re-exported: the names' one home is syntax)
from runtime.spec import DeploymentSpec, FlavorSpec, PlatformSpec, RenderError, Toleration

# ---------------------------------------------------------------------------------------------
# Labels and annotations
# ---------------------------------------------------------------------------------------------

MANAGED_BY = "llm-portal"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_TENANT = "llm-portal.io/tenant"
LABEL_DEPLOYMENT_ID = "llm-portal.io/deployment-id"
# The one node label the portal pins pods by: `llm-portal.io/flavor=<flavor name>` on every
# ResourceFlavor (GPU flavors and the CPU flavor), every NodePool the portal renders, and the
# nodes of every flavor (docs/node-labels.md). See gpu_node_selector for why one key.
LABEL_FLAVOR = "llm-portal.io/flavor"
# The label domain of the portal's own keys: a flavor's own node labels may not use it.
LABEL_DOMAIN = "llm-portal.io"
# A ResourceFlavor holds at most 8 node labels (CRD maxProperties); LABEL_FLAVOR takes one.
MAX_RESOURCE_FLAVOR_LABELS = 8
MAX_OWN_NODE_LABELS = MAX_RESOURCE_FLAVOR_LABELS - 1
LABEL_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
# The WorkloadPriorityClass Kueue gives the workload (kubernetes-sigs/kueue v0.19.2,
# pkg/controller/constants/constants.go WorkloadPriorityClassLabel, read from the job's labels by
# pkg/controller/jobframework/utils.go WorkloadPriorityClassName).
LABEL_PRIORITY_CLASS = "kueue.x-k8s.io/priority-class"


def kueue_labels(spec) -> dict[str, str]:
    """The labels Kueue reads on a workload object: its LocalQueue, and its priority class if any."""
    labels = {LABEL_QUEUE_NAME: spec.queue_name}
    if spec.priority_class:
        labels[LABEL_PRIORITY_CLASS] = spec.priority_class
    return labels


LABEL_JOB_UID = "kueue.x-k8s.io/job-uid"
ANNOTATION_ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"

# Stamped by the backends on what they apply, read back by the status mapping and the sweep.
ANNOTATION_GENERATION = "llm-portal.io/generation"
ANNOTATION_SPEC_HASH = "llm-portal.io/spec-hash"
ANNOTATION_CLUSTER_HASH = "llm-portal.io/cluster-hash"
# The hash of the exposure that Kuadrant enforces, or why it is not exposed (runtime.backends.exposure).
ANNOTATION_EXPOSURE = "llm-portal.io/exposure"


def deployment_labels(spec: DeploymentSpec) -> dict[str, str]:
    """Labels that identify a deployment's objects (and pods) as the portal's."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_TENANT: spec.tenant_slug,
        LABEL_DEPLOYMENT_ID: str(spec.deployment_id),
    }


def portal_labels(tenant_slug: str | None = None) -> dict[str, str]:
    """Labels on the portal's cluster-wide and per-tenant objects (namespaces, Kueue queues)."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY}
    if tenant_slug:
        labels[LABEL_TENANT] = tenant_slug
    return labels


# ---------------------------------------------------------------------------------------------
# Ports and resources
# ---------------------------------------------------------------------------------------------

# Ray Serve's HTTP proxy and Ray's metrics export port: where the kuberay backend's endpoint
# and metrics URLs point, and the port the scrape falls back to on a pod that names none.
PORT_SERVE = 8000
PORT_METRICS = 8080

GPU_RESOURCE = "nvidia.com/gpu"
# NCCL and vLLM's worker processes exchange tensors through /dev/shm; the container default of
# 64Mi makes tensor-parallel start-up crash.
SHM_MIN_GI = 16


def container_port(name: str, port: int) -> dict[str, Any]:
    return {"name": name, "containerPort": port, "protocol": "TCP"}


def gpu_pod_resources(flavor: FlavorSpec, gpus: int) -> dict[str, Any]:
    """A GPU pod's requests (== its limits): the GPUs, and CPU and memory per GPU of the flavor.

    Requests == limits: the device plugin demands it for GPUs, and for CPU/memory it gives
    Guaranteed QoS so an inference pod is the last to be evicted under node pressure.
    """
    return {
        GPU_RESOURCE: gpus,
        "cpu": flavor.cpu_per_gpu * gpus,
        "memory": f"{flavor.memory_gib_per_gpu * gpus}Gi",
    }


def flavor_node_labels(flavor: FlavorSpec) -> dict[str, str]:
    """The labels of `flavor`'s nodes: its own node labels plus LABEL_FLAVOR=<its name>.

    What its ResourceFlavor lists (and Kueue injects into admitted pods) and what the portal's
    NodePool puts on the nodes it makes. LABEL_FLAVOR is set last: it always names the flavor.
    """
    return dict(sorted({**dict(flavor.node_labels), LABEL_FLAVOR: flavor.name}.items()))


def cpu_flavor_node_labels(platform: PlatformSpec) -> dict[str, str]:
    """The labels of the CPU nodes Ray heads run on: KUEUE_CPU_NODE_LABELS plus LABEL_FLAVOR=<the
    CPU flavor's name>, so the CPU flavor is labelled even when the platform names no labels."""
    labels = {**dict(platform.cpu_flavor_node_labels), LABEL_FLAVOR: platform.cpu_flavor}
    if len(labels) > MAX_RESOURCE_FLAVOR_LABELS:
        raise ValueError(
            f"KUEUE_CPU_NODE_LABELS: at most {MAX_OWN_NODE_LABELS} labels (a ResourceFlavor holds "
            f"{MAX_RESOURCE_FLAVOR_LABELS}, one of them {LABEL_FLAVOR})"
        )
    return dict(sorted(labels.items()))


def gpu_node_selector(flavor: FlavorSpec) -> dict[str, str]:
    """The nodeSelector that pins a GPU pod to `flavor`: LABEL_FLAVOR=<its name>, nothing else.

    Kueue charges a pod set to the first flavor of the ClusterQueue (in list order) that has
    room and whose node labels the pod does not rule out, so a pod must rule out every other
    flavor. Since v0.18.2 Kueue compares a pod's nodeSelector with each flavor's *own* label keys
    only (kubernetes-sigs/kueue v0.19.2, pkg/scheduler/flavorassigner/flavorassigner.go,
    `FlavorAssigner.checkFlavorForPodSets` → `flavorSelector(&podSpec, flavorLabelKeys)`; before
    v0.18.2 the union of the group's keys): a pod selecting `cloud.example.com/gpu: h100` "fits" a
    flavor labelled only `nvidia.com/gpu.product: NVIDIA-L4`, is charged there, gets both
    selectors and never schedules. Every flavor the portal renders carries LABEL_FLAVOR with its
    own value, so selecting that one key rules out every other flavor under either rule, and it
    equals what Kueue injects on admission, so the two never clash.
    """
    return {LABEL_FLAVOR: flavor.name}


def cpu_node_selector(platform: PlatformSpec) -> dict[str, str]:
    """The nodeSelector of CPU-only pods (Ray heads): LABEL_FLAVOR=<the CPU flavor> (as GPU pods)."""
    return {LABEL_FLAVOR: platform.cpu_flavor}


# GPU nodes of the pools the portal renders are tainted with it (runtime.manifests.karpenter), so
# only pods that ask for GPUs land there; the GPU pods the portal renders tolerate it, Ray heads
# do not. The NVIDIA GPU operator and the clouds' GPU node images use the same key.
GPU_TAINT_KEY = GPU_RESOURCE
GPU_TOLERATION: dict[str, Any] = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def gpu_tolerations() -> list[dict[str, Any]]:
    """The tolerations of a GPU pod (a fresh list): the GPU nodes' taint. The flavor's own
    tolerations stay Kueue's to inject on admission."""
    return [dict(GPU_TOLERATION)]


def toleration(toleration: Toleration) -> dict[str, Any]:
    """A toleration as the API writes it (a ResourceFlavor's, which Kueue copies into pods)."""
    rendered: dict[str, Any] = {"operator": toleration.operator, "effect": toleration.effect}
    if toleration.key:
        rendered["key"] = toleration.key
    # The API server rejects a value with operator Exists (ResourceFlavor CEL rule).
    if toleration.operator != "Exists" and toleration.value:
        rendered["value"] = toleration.value
    return rendered


def hf_token_env(spec: DeploymentSpec) -> list[dict[str, Any]]:
    """HF_TOKEN from the deployment's Secret in the tenant namespace, if it names one."""
    if not spec.hf_token_secret:
        return []
    return [
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": spec.hf_token_secret, "key": "HF_TOKEN"}},
        }
    ]


def shm_volume(platform: PlatformSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount): a memory-backed /dev/shm of at least SHM_MIN_GI."""
    shm_gi = max(platform.shm_size_gi, SHM_MIN_GI)
    return (
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gi}Gi"}},
        {"name": "dshm", "mountPath": "/dev/shm"},
    )


def model_cache_volume(platform: PlatformSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, volumeMount): the shared model-cache PVC at the Hugging Face cache path."""
    return (
        {
            "name": "model-cache",
            "persistentVolumeClaim": {"claimName": platform.model_cache_pvc},
        },
        {"name": "model-cache", "mountPath": platform.hf_cache_path},
    )


# ---------------------------------------------------------------------------------------------
# Names and model sources
# ---------------------------------------------------------------------------------------------

PVC_MODEL_ROOT = "/models"


def parse_pvc_source(model_source: str) -> tuple[str, str]:
    """`pvc://claim/some/path` → ("claim", "some/path"); the path may be empty."""
    claim, _, path = model_source.removeprefix("pvc://").partition("/")
    if not DNS1123_LABEL.fullmatch(claim):
        raise RenderError(f"model source {model_source!r} does not name a valid PVC")
    path = path.strip("/")
    # Defence in depth (deployments.validation refuses these first): the path must stay inside the
    # claim's mount, so no "..", ".", empty segments, backslashes or encodings that hide them.
    if (path and any(part in ("", ".", "..") for part in path.split("/"))) or any(c in path for c in "\\%\x00"):
        raise RenderError(f"model source {model_source!r} leaves its volume")
    return claim, path


def pvc_model_path(model_source: str) -> str | None:
    """Where a `pvc://` model is mounted in the worker pod, or None for other sources."""
    if not model_source.startswith("pvc://"):
        return None
    claim, path = parse_pvc_source(model_source)
    return "/".join(part for part in (PVC_MODEL_ROOT, claim, path) if part)


def placement_error(
    *, tensor_parallel_size: int, pipeline_parallel_size: int, gpus_per_node: int, flavor: str, whole_node_pods: bool
) -> str | None:
    """Why a replica of this shape cannot be placed on `flavor`'s nodes, or None when it can.

    The one placement rule, used by both renderers and by the request validation. Tensor
    parallelism needs NVLink, so a TP group lives inside one node and every pod holds whole TP
    groups (the node's GPUs are a multiple of TP); pipeline stages may cross nodes only where the
    backend splits a replica into whole-node pods (`whole_node_pods`: KubeRay worker groups).
    """
    tp, gpus = tensor_parallel_size, tensor_parallel_size * pipeline_parallel_size
    if tp > gpus_per_node:
        return (
            f"tensor_parallel_size {tp} does not fit in one {flavor} node ({gpus_per_node} GPUs, one NVLink "
            "domain); use pipeline parallelism across nodes"
        )
    if gpus_per_node % tp:
        return (
            f"tensor_parallel_size {tp} must divide the {gpus_per_node} GPUs of a {flavor} node, "
            "or a tensor-parallel group would straddle two nodes"
        )
    if gpus > gpus_per_node and not whole_node_pods:
        return (
            f"tensor_parallel_size {tp} x pipeline_parallel_size {pipeline_parallel_size} = {gpus} GPUs per "
            f"replica, but a {flavor} node has {gpus_per_node}; this backend runs a replica in one pod on one "
            "node, so multi-node replicas need the kuberay backend"
        )
    if gpus > gpus_per_node and gpus % gpus_per_node:
        return f"{gpus} GPUs per replica cannot be split into whole {gpus_per_node}-GPU nodes"
    return None
