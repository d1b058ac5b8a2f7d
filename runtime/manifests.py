"""Pure builders for every object the portal puts on a cluster.

Each function here is a function of frozen specs (`runtime.spec`) and nothing else: no ORM,
no I/O, no `kubernetes` import. `runtime.k8s` applies what these return; the tests compare
them with golden files and validate them against the real CRD schemas in ../shared.

The Ray Serve LLM application config (`llm_config`) is built in this one place so that the
kuberay backend (inside serveConfigV2) and the local backend serve exactly the same app.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml

from runtime.spec import (
    ANNOTATION_ELASTIC_JOB,
    LABEL_DEPLOYMENT_ID,
    LABEL_MANAGED_BY,
    LABEL_QUEUE_NAME,
    LABEL_TENANT,
    MANAGED_BY,
    RAYSERVICE_NAME_MAX,
    DeploymentSpec,
    FlavorQuotaSpec,
    FlavorSpec,
    PlatformSpec,
    TenantQueueSpec,
    Toleration,
)

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
RAY_API_VERSION = "ray.io/v1"

# The one Serve application in serveConfigV2; status lives under
# `status.activeServiceStatus.applicationStatuses[SERVE_APP_NAME]`.
SERVE_APP_NAME = "llm"
SERVE_IMPORT_PATH = "ray.serve.llm:build_openai_app"

GPU_RESOURCE = "nvidia.com/gpu"
# Order matters: Kueue requires every flavor to list its resources in coveredResources order.
COVERED_RESOURCES = (GPU_RESOURCE, "cpu", "memory")

WORKER_GROUP_NAME = "gpu"
PVC_MODEL_ROOT = "/models"
SHM_MIN_GI = 16

PORT_GCS = 6379
PORT_DASHBOARD = 8265
PORT_CLIENT = 10001
PORT_SERVE = 8000
PORT_METRICS = 8080

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<suffix>[a-zA-Z]*)$")
_BINARY_SUFFIX = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_DECIMAL_SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}


# ---------------------------------------------------------------------------------------------
# Names, labels, small helpers
# ---------------------------------------------------------------------------------------------


def rayservice_name(deployment_name: str) -> str:
    """The RayService name for a deployment, or ValueError when KubeRay would refuse it.

    KubeRay derives Service and pod names (`<name>-head-svc`, `<name>-serve-svc`, worker pod
    names) from the RayService name, so it rejects names over 47 characters. Refusing here
    gives the user a clear message before anything reaches the cluster.
    """
    if len(deployment_name) > RAYSERVICE_NAME_MAX:
        raise ValueError(
            f"RayService name {deployment_name!r} is {len(deployment_name)} characters; "
            f"KubeRay allows at most {RAYSERVICE_NAME_MAX}"
        )
    if not _DNS1123_LABEL.match(deployment_name):
        raise ValueError(
            f"RayService name {deployment_name!r} is not a DNS-1123 label "
            "(lowercase letters, digits and '-', starting and ending with an alphanumeric)"
        )
    return deployment_name


def deployment_labels(spec: DeploymentSpec) -> dict[str, str]:
    """Labels that identify a deployment's objects (and pods) as the portal's."""
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_TENANT: spec.tenant_slug,
        LABEL_DEPLOYMENT_ID: str(spec.deployment_id),
    }


def _portal_labels(tenant_slug: str | None = None) -> dict[str, str]:
    labels = {LABEL_MANAGED_BY: MANAGED_BY}
    if tenant_slug:
        labels[LABEL_TENANT] = tenant_slug
    return labels


def _cpu_millis(quantity: str | int) -> int:
    """A CPU quantity ("2", "500m", 4) in millicores."""
    text = str(quantity)
    if text.endswith("m"):
        return int(text[:-1])
    return round(float(text) * 1000)


def _memory_bytes(quantity: str | int) -> int:
    """A memory quantity ("8Gi", "512Mi", "1G", 1024) in bytes."""
    match = _QUANTITY.match(str(quantity))
    if match is None:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    number, suffix = float(match["number"]), match["suffix"]
    if suffix in _BINARY_SUFFIX:
        return round(number * _BINARY_SUFFIX[suffix])
    if suffix in _DECIMAL_SUFFIX:
        return round(number * _DECIMAL_SUFFIX[suffix])
    raise ValueError(f"unknown memory suffix in {quantity!r}")


def _cpu_quantity(millis: int) -> int | str:
    """Whole cores as an int (how people write them), otherwise millicores."""
    return millis // 1000 if millis % 1000 == 0 else f"{millis}m"


def _memory_quantity(num_bytes: int) -> str:
    """Gi where exact (the unit pods request in), so quotas read like what they must cover."""
    for suffix in ("Gi", "Mi", "Ki"):
        unit = _BINARY_SUFFIX[suffix]
        if num_bytes % unit == 0:
            return f"{num_bytes // unit}{suffix}"
    return str(num_bytes)


def _parse_pvc_source(model_source: str) -> tuple[str, str]:
    """`pvc://claim/some/path` → ("claim", "some/path"); the path may be empty."""
    claim, _, path = model_source.removeprefix("pvc://").partition("/")
    if not _DNS1123_LABEL.match(claim):
        raise ValueError(f"model source {model_source!r} does not name a valid PVC")
    path = path.strip("/")
    # Defence in depth (deployments.validation refuses these first): the path must stay inside the
    # claim's mount, so no "..", ".", empty segments, backslashes or encodings that hide them.
    if (path and any(part in ("", ".", "..") for part in path.split("/"))) or any(c in path for c in "\\%\x00"):
        raise ValueError(f"model source {model_source!r} leaves its volume")
    return claim, path


def pvc_model_path(model_source: str) -> str | None:
    """Where a `pvc://` model is mounted in the worker pod, or None for other sources."""
    if not model_source.startswith("pvc://"):
        return None
    claim, path = _parse_pvc_source(model_source)
    return "/".join(part for part in (PVC_MODEL_ROOT, claim, path) if part)


def pods_per_replica(spec: DeploymentSpec) -> int:
    """Worker pods one model replica spans.

    Tensor parallelism needs NVLink, so one TP group must fit inside one node; pipeline
    stages may cross nodes. A replica needing more GPUs than a node has is therefore split
    into whole-node pods (Ray places the PP stages across them).
    """
    gpus = spec.gpus_per_replica
    per_node = spec.flavor.gpus_per_node
    if spec.tensor_parallel_size > per_node:
        raise ValueError(
            f"tensor_parallel_size {spec.tensor_parallel_size} does not fit in one "
            f"{spec.flavor.name} node ({per_node} GPUs); use pipeline parallelism across nodes"
        )
    if gpus <= per_node:
        return 1
    if gpus % per_node:
        raise ValueError(f"{gpus} GPUs per replica cannot be split into whole {per_node}-GPU nodes")
    return gpus // per_node


def gpus_per_pod(spec: DeploymentSpec) -> int:
    """GPUs each worker pod asks for: the replica's GPUs, capped at one node."""
    return min(spec.gpus_per_replica, spec.flavor.gpus_per_node)


# ---------------------------------------------------------------------------------------------
# Ray Serve LLM application
# ---------------------------------------------------------------------------------------------


def _model_source(spec: DeploymentSpec) -> str:
    """What Ray Serve LLM loads: a Hugging Face id, an s3:// URI, or a mounted PVC path."""
    return pvc_model_path(spec.model_source) or spec.model_source


def llm_config(spec: DeploymentSpec) -> dict[str, Any]:
    """The Ray Serve LLM `LLMConfig` for `spec`, as plain data.

    Shared by the kuberay backend (inside serveConfigV2) and the local backend, so both
    serve the same app. Unset engine options are left out so vLLM's own defaults apply
    (e.g. `max_model_len` from the model's config).
    """
    engine = spec.engine
    engine_kwargs: dict[str, Any] = {
        "tensor_parallel_size": spec.tensor_parallel_size,
        "pipeline_parallel_size": spec.pipeline_parallel_size,
        "max_model_len": engine.max_model_len,
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "enable_chunked_prefill": engine.enable_chunked_prefill,
        "max_num_batched_tokens": engine.max_num_batched_tokens,
        "quantization": engine.quantization,
        "dtype": engine.dtype,
        "trust_remote_code": engine.trust_remote_code,
    }
    config: dict[str, Any] = {
        "model_loading_config": {
            "model_id": spec.served_model_name,
            "model_source": _model_source(spec),
        },
        "engine_kwargs": {k: v for k, v in engine_kwargs.items() if v is not None},
        "deployment_config": {
            "autoscaling_config": {
                "min_replicas": spec.min_replicas,
                "max_replicas": spec.max_replicas,
                "target_ongoing_requests": spec.target_ongoing_requests,
            },
        },
    }
    # Ray turns accelerator_type into a placement constraint; a CPU-only (local) flavor
    # leaves it empty so the replica can be placed at all.
    if spec.flavor.accelerator_type:
        config["accelerator_type"] = spec.flavor.accelerator_type
    return config


def serve_config_v2(spec: DeploymentSpec) -> dict[str, Any]:
    """The Ray Serve config: one OpenAI-compatible application serving `llm_config(spec)`."""
    return {
        "applications": [
            {
                "name": SERVE_APP_NAME,
                "import_path": SERVE_IMPORT_PATH,
                "route_prefix": "/",
                "args": {"llm_configs": [llm_config(spec)]},
            }
        ]
    }


def render_serve_config(spec: DeploymentSpec) -> str:
    """serveConfigV2 as YAML text, keys sorted so that equal specs give byte-equal text.

    KubeRay compares the text with what it last submitted to redeploy on change, so any
    nondeterminism here would cause needless Serve redeploys.
    """
    return yaml.safe_dump(serve_config_v2(spec), sort_keys=True, default_flow_style=False)


# ---------------------------------------------------------------------------------------------
# RayService
# ---------------------------------------------------------------------------------------------


def _container_port(name: str, port: int) -> dict[str, Any]:
    return {"name": name, "containerPort": port, "protocol": "TCP"}


def _hf_token_env(spec: DeploymentSpec) -> list[dict[str, Any]]:
    if not spec.hf_token_secret:
        return []
    return [
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": spec.hf_token_secret, "key": "HF_TOKEN"}},
        }
    ]


def _head_group(spec: DeploymentSpec, platform: PlatformSpec) -> dict[str, Any]:
    """Head pod: GCS, dashboard, Serve controller and proxy; never a GPU."""
    resources = {"cpu": platform.head_cpu, "memory": platform.head_memory}
    group: dict[str, Any] = {
        # num-gpus 0 keeps Ray from scheduling model replicas on the head.
        "rayStartParams": {
            "num-gpus": "0",
            "dashboard-host": "0.0.0.0",
            "metrics-export-port": str(PORT_METRICS),
        },
        "template": {
            "metadata": {"labels": deployment_labels(spec)},
            "spec": {
                "containers": [
                    {
                        "name": "ray-head",
                        "image": platform.ray_image,
                        "imagePullPolicy": "IfNotPresent",
                        "ports": [
                            _container_port("gcs-server", PORT_GCS),
                            _container_port("dashboard", PORT_DASHBOARD),
                            _container_port("client", PORT_CLIENT),
                            _container_port("serve", PORT_SERVE),
                            _container_port("metrics", PORT_METRICS),
                        ],
                        "resources": {"requests": dict(resources), "limits": dict(resources)},
                    }
                ],
            },
        },
    }
    if spec.hf_token_secret:
        # Ray Serve LLM forwards HF_TOKEN from the controller's environment into the
        # replicas' runtime env, so the head needs it as well as the workers.
        group["template"]["spec"]["containers"][0]["env"] = _hf_token_env(spec)
    return group


def _worker_volumes(spec: DeploymentSpec, platform: PlatformSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts) for a GPU worker pod."""
    # NCCL and vLLM's multiprocessing exchange tensors through /dev/shm; the container
    # default of 64Mi makes tensor-parallel start-up crash.
    shm_gi = max(platform.shm_size_gi, SHM_MIN_GI)
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gi}Gi"}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if platform.model_cache_pvc:
        volumes.append(
            {
                "name": "model-cache",
                "persistentVolumeClaim": {"claimName": platform.model_cache_pvc},
            }
        )
        mounts.append({"name": "model-cache", "mountPath": platform.hf_cache_path})
    if spec.model_source.startswith("pvc://"):
        claim, _ = _parse_pvc_source(spec.model_source)
        # Read-only: a tenant's weights must not be changed by the engine serving them.
        volumes.append(
            {
                "name": "model-source",
                "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
            }
        )
        mounts.append({"name": "model-source", "mountPath": f"{PVC_MODEL_ROOT}/{claim}", "readOnly": True})
    return volumes, mounts


def _worker_group(spec: DeploymentSpec, platform: PlatformSpec) -> dict[str, Any]:
    """The one GPU worker group: whole replicas' worth of pods, sized per GPU."""
    gpus = gpus_per_pod(spec)
    pods = pods_per_replica(spec)
    flavor = spec.flavor
    # Requests == limits: the device plugin demands it for GPUs, and for CPU/memory it gives
    # Guaranteed QoS so an inference pod is the last to be evicted under node pressure.
    resources = {
        GPU_RESOURCE: gpus,
        "cpu": flavor.cpu_per_gpu * gpus,
        "memory": f"{flavor.memory_gib_per_gpu * gpus}Gi",
    }
    volumes, mounts = _worker_volumes(spec, platform)
    env = [
        {"name": "HF_HOME", "value": platform.hf_cache_path},
        *_hf_token_env(spec),
        # Use InfiniBand/RoCE and GPUDirect RDMA where the nodes have them; pipeline stages
        # across nodes are otherwise limited to TCP.
        {"name": "NCCL_IB_DISABLE", "value": "0"},
        {"name": "NCCL_NET_GDR_LEVEL", "value": "2"},
        {"name": "NCCL_DEBUG", "value": platform.nccl_debug},
    ]
    return {
        "groupName": WORKER_GROUP_NAME,
        # The KubeRay autoscaler moves `replicas` between these bounds; keeping them whole
        # multiples of pods_per_replica means a replica is never left half-placed.
        "replicas": spec.min_replicas * pods,
        "minReplicas": spec.min_replicas * pods,
        "maxReplicas": spec.max_replicas * pods,
        "rayStartParams": {"metrics-export-port": str(PORT_METRICS)},
        "template": {
            "metadata": {"labels": deployment_labels(spec)},
            "spec": {
                # No nodeSelector or tolerations: Kueue injects the admitted ResourceFlavor's
                # nodeLabels and tolerations at admission. Setting them here would pin the
                # pods to one flavor behind Kueue's back (and clash with what it injects).
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": platform.ray_image,
                        "imagePullPolicy": "IfNotPresent",
                        "ports": [_container_port("metrics", PORT_METRICS)],
                        "env": env,
                        "resources": {"requests": dict(resources), "limits": dict(resources)},
                        # vLLM's CUDA IPC between worker processes needs ptrace rights.
                        "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}},
                        "volumeMounts": mounts,
                    }
                ],
                "volumes": volumes,
            },
        },
    }


def render_rayservice(spec: DeploymentSpec, platform: PlatformSpec) -> dict[str, Any]:
    """The RayService for `spec`: Ray Serve LLM app in serveConfigV2, one GPU worker group.

    Deliberately absent:
    - `spec.rayClusterConfig.suspend`: Kueue owns it (it suspends the job until admission
      and resumes it). If the portal applied it, every reconcile would fight Kueue, either
      un-suspending an unadmitted job or suspending a running one.
    - nodeSelector/tolerations on pods: injected by Kueue from the admitted ResourceFlavor.

    `spec.upgradeStrategy.type` is "None": "NewCluster" brings up a second full cluster
    before tearing down the old one, i.e. 2x the deployment's GPUs during every upgrade,
    which the tenant's Kueue quota (sized for 1x) cannot admit, so upgrades would hang.
    With "None", KubeRay still applies serveConfigV2 changes in place but leaves the
    running cluster alone when rayClusterConfig changes; such a change has to be rolled
    out by deleting and recreating the RayService.
    """
    name = rayservice_name(spec.name)
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": spec.namespace,
        "labels": {**deployment_labels(spec), LABEL_QUEUE_NAME: spec.queue_name},
    }
    if spec.autoscaling:
        # Lets Kueue resize the admitted Workload as the Ray autoscaler adds or removes
        # workers instead of evicting the whole job when replicas change.
        metadata["annotations"] = {ANNOTATION_ELASTIC_JOB: "true"}
    cluster: dict[str, Any] = {
        "rayVersion": platform.ray_version,
        "headGroupSpec": _head_group(spec, platform),
        "workerGroupSpecs": [_worker_group(spec, platform)],
    }
    if spec.autoscaling:
        cluster["enableInTreeAutoscaling"] = True
    return {
        "apiVersion": RAY_API_VERSION,
        "kind": "RayService",
        "metadata": metadata,
        "spec": {
            "serveConfigV2": render_serve_config(spec),
            "upgradeStrategy": {"type": "None"},
            "rayClusterConfig": cluster,
        },
    }


# ---------------------------------------------------------------------------------------------
# Kueue
# ---------------------------------------------------------------------------------------------


def render_namespace(spec: TenantQueueSpec) -> dict[str, Any]:
    """The tenant's namespace, labelled as the portal's."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": spec.namespace, "labels": _portal_labels(spec.tenant_slug)},
    }


def _toleration(toleration: Toleration) -> dict[str, Any]:
    rendered: dict[str, Any] = {"operator": toleration.operator, "effect": toleration.effect}
    if toleration.key:
        rendered["key"] = toleration.key
    # The API server rejects a value with operator Exists (ResourceFlavor CEL rule).
    if toleration.operator != "Exists" and toleration.value:
        rendered["value"] = toleration.value
    return rendered


def render_resource_flavor(flavor: FlavorSpec) -> dict[str, Any]:
    """The Kueue ResourceFlavor for one GPU flavor.

    `nodeLabels` and `tolerations` are what Kueue injects into admitted pods, which is why
    the RayService sets neither.
    """
    spec: dict[str, Any] = {}
    if flavor.node_labels:
        spec["nodeLabels"] = dict(sorted(flavor.node_labels))
    if flavor.tolerations:
        spec["tolerations"] = [_toleration(t) for t in flavor.tolerations]
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor.name, "labels": _portal_labels()},
        "spec": spec,
    }


def _head_overhead(platform: PlatformSpec) -> tuple[int, int]:
    """(millicores, bytes) one RayService head pod adds to a Workload."""
    return _cpu_millis(platform.head_cpu), _memory_bytes(platform.head_memory)


def _flavor_quota(quota: FlavorQuotaSpec, platform: PlatformSpec, *, in_cohort: bool) -> dict[str, Any]:
    """One flavor's [gpu, cpu, memory] quotas, in COVERED_RESOURCES order.

    CPU and memory follow the GPUs: per-GPU share of the node plus, per GPU, one head pod.
    Kueue counts the head pod (which has no GPU) against the same quota, and a tenant can
    run at most one deployment per GPU, so this headroom keeps GPUs the only binding
    constraint; without it a 1-GPU quota could never admit a 1-GPU deployment.
    """
    flavor = quota.flavor
    head_millis, head_bytes = _head_overhead(platform)

    def cpu(gpus: int) -> int | str:
        return _cpu_quantity(gpus * (flavor.cpu_per_gpu * 1000 + head_millis))

    def memory(gpus: int) -> str:
        return _memory_quantity(gpus * (flavor.memory_gib_per_gpu * 2**30 + head_bytes))

    def resource(name: str, convert: Callable[[int], int | str]) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": name, "nominalQuota": convert(quota.nominal_gpus)}
        # Kueue rejects borrowing/lending limits on a ClusterQueue without a cohort.
        if in_cohort and quota.borrowing_limit_gpus is not None:
            entry["borrowingLimit"] = convert(quota.borrowing_limit_gpus)
        if in_cohort and quota.lending_limit_gpus is not None:
            entry["lendingLimit"] = convert(quota.lending_limit_gpus)
        return entry

    return {
        "name": flavor.name,
        "resources": [
            resource(GPU_RESOURCE, int),
            resource("cpu", cpu),
            resource("memory", memory),
        ],
    }


def render_cluster_queue(spec: TenantQueueSpec, platform: PlatformSpec | None = None) -> dict[str, Any]:
    """The tenant's ClusterQueue: GPU quota per flavor, in the tenant's borrowing cohort.

    Preemption: a tenant reclaims its own nominal quota from borrowers regardless of
    priority (`reclaimWithinCohort: Any`), and inside its queue a higher-priority
    deployment may displace a lower one (`withinClusterQueue: LowerPriority`).
    `platform` supplies the head pod size for the CPU/memory headroom (defaults apply
    when omitted).
    """
    platform = platform or PlatformSpec()
    in_cohort = bool(spec.cohort)
    cq_spec: dict[str, Any] = {
        # Only the tenant's own namespace may submit to its queue. The API server sets
        # kubernetes.io/metadata.name itself, so no one can relabel their way in.
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": spec.namespace}},
        # A large pending deployment must not block smaller ones that fit.
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {
            "reclaimWithinCohort": "Any",
            "withinClusterQueue": "LowerPriority",
        },
    }
    if spec.quotas:
        cq_spec["resourceGroups"] = [
            {
                "coveredResources": list(COVERED_RESOURCES),
                "flavors": [_flavor_quota(q, platform, in_cohort=in_cohort) for q in spec.quotas],
            }
        ]
    if in_cohort:
        cq_spec["cohortName"] = spec.cohort
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": spec.cluster_queue, "labels": _portal_labels(spec.tenant_slug)},
        "spec": cq_spec,
    }


def render_local_queue(spec: TenantQueueSpec) -> dict[str, Any]:
    """The LocalQueue in the tenant namespace that RayServices name in their queue label."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {
            "name": spec.local_queue,
            "namespace": spec.namespace,
            "labels": _portal_labels(spec.tenant_slug),
        },
        "spec": {"clusterQueue": spec.cluster_queue},
    }


def render_cohort(name: str) -> dict[str, Any]:
    """A Kueue Cohort object for `name`.

    ClusterQueues share quota by naming the same cohort even without this object; creating
    it makes the cohort visible (status, fair sharing) and gives a place for shared quota.
    """
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Cohort",
        "metadata": {"name": name, "labels": _portal_labels()},
        "spec": {},
    }
