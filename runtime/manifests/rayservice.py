"""The RayService a kuberay deployment runs, and the Ray Serve LLM application inside it.

Functions of frozen specs (`runtime.spec`) and nothing else: no ORM, no I/O, no `kubernetes`
import. `runtime.k8s` applies what `render_rayservice` returns; the tests compare it with golden
files and validate it against the real CRD schema in ../shared.

The Ray Serve LLM application config (`llm_config`) is built in this one place so that the
kuberay backend (inside serveConfigV2) and the local backend serve exactly the same app.
"""

from __future__ import annotations

from typing import Any

import yaml

from runtime.accelerators import ray_accelerator_type
from runtime.manifests.common import (
    ANNOTATION_ELASTIC_JOB,
    DNS1035_LABEL,
    PORT_METRICS,
    PORT_SERVE,
    PVC_MODEL_ROOT,
    container_port,
    cpu_node_selector,
    deployment_labels,
    gpu_node_selector,
    gpu_pod_resources,
    gpu_tolerations,
    hf_token_env,
    kueue_labels,
    model_cache_volume,
    parse_pvc_source,
    placement_error,
    pvc_model_path,
    shm_volume,
)
from runtime.manifests.karpenter import serving_pod_annotations
from runtime.manifests.storage import s3_credentials_env
from runtime.manifests.topology import slice_annotations
from runtime.spec import DeploymentSpec, PlatformSpec, RenderError
from runtime.tasks import engine_kwargs as task_engine_kwargs
from runtime.tasks import pools

RAY_API_VERSION = "ray.io/v1"

# The one Serve application in serveConfigV2; status lives under
# `status.activeServiceStatus.applicationStatuses[SERVE_APP_NAME]`.
SERVE_APP_NAME = "llm"
SERVE_IMPORT_PATH = "ray.serve.llm:build_openai_app"

WORKER_GROUP_NAME = "gpu"

PORT_GCS = 6379
PORT_DASHBOARD = 8265
PORT_CLIENT = 10001

# KubeRay derives Service and pod names from the RayService name; it refuses longer names.
RAYSERVICE_NAME_MAX = 47


# ---------------------------------------------------------------------------------------------
# Names and sizes
# ---------------------------------------------------------------------------------------------


def serve_service(spec: DeploymentSpec) -> tuple[str, int]:
    """(Service, port) that serves the app: KubeRay's `<name>-serve-svc`, which selects the pods
    whose Serve proxy is ready (ray.io/serve=true), on the Serve port."""
    return f"{spec.name}-serve-svc", PORT_SERVE


def rayservice_name(deployment_name: str) -> str:
    """The RayService name for a deployment, or RenderError when KubeRay would refuse it.

    KubeRay derives Service and pod names (`<name>-head-svc`, `<name>-serve-svc`, worker pod
    names) from the RayService name, so it rejects names over 47 characters. Refusing here
    gives the user a clear message before anything reaches the cluster.
    """
    if len(deployment_name) > RAYSERVICE_NAME_MAX:
        raise RenderError(
            f"RayService name {deployment_name!r} is {len(deployment_name)} characters; "
            f"KubeRay allows at most {RAYSERVICE_NAME_MAX}"
        )
    if not DNS1035_LABEL.fullmatch(deployment_name):
        raise RenderError(
            f"RayService name {deployment_name!r} is not a DNS-1035 label "
            "(lowercase letters, digits and '-', starting with a letter and ending with an alphanumeric)"
        )
    return deployment_name


def pods_per_replica(spec: DeploymentSpec) -> int:
    """Worker pods one model replica spans.

    Tensor parallelism needs NVLink, so one TP group must fit inside one node; pipeline
    stages may cross nodes. A replica needing more GPUs than a node has is therefore split
    into whole-node pods (Ray places the PP stages across them).
    """
    gpus = spec.gpus_per_replica
    per_node = spec.flavor.gpus_per_node
    problem = placement_error(
        tensor_parallel_size=spec.tensor_parallel_size,
        pipeline_parallel_size=spec.pipeline_parallel_size,
        gpus_per_node=per_node,
        flavor=spec.flavor.name,
        whole_node_pods=True,
    )
    if problem:
        raise RenderError(problem)
    if gpus <= per_node:
        return 1
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
        "kv_cache_dtype": None if engine.kv_cache_dtype == "auto" else engine.kv_cache_dtype,
        "trust_remote_code": engine.trust_remote_code,
        # The pinned Hugging Face revision (issue 33): Ray Serve LLM hands engine_kwargs to vLLM's
        # engine arguments, as it does every key above; the code at the same revision when the
        # model's own code runs. The local engine turns these into --revision / --code-revision.
        "revision": spec.model_revision,
        "code_revision": spec.model_revision if engine.trust_remote_code else None,
    }
    if pools(spec.task):  # runtime.tasks: the pooling runner, chunked prefill left to vLLM
        engine_kwargs["enable_chunked_prefill"] = None
    engine_kwargs |= task_engine_kwargs(spec.task)
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
    # Ray turns accelerator_type into a placement constraint; a CPU-only flavor (empty, or the
    # portal's "CPU") gives none: Ray refuses one on a CPU-only config (runtime.accelerators).
    if accelerator := ray_accelerator_type(spec.flavor.accelerator_type):
        config["accelerator_type"] = accelerator
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


def _head_group(spec: DeploymentSpec, platform: PlatformSpec) -> dict[str, Any]:
    """Head pod: GCS, dashboard, Serve controller and proxy; never a GPU.

    Charged to the CPU flavor (listed first in the tenant's ClusterQueue, and selected here
    through its node labels when it has any), never to a GPU flavor's quota. It carries no
    GPU toleration, so it stays off tainted GPU nodes.
    """
    resources = {"cpu": platform.head_cpu, "memory": platform.head_memory}
    group: dict[str, Any] = {
        # num-gpus 0 keeps Ray from scheduling model replicas on the head.
        "rayStartParams": {
            "num-gpus": "0",
            "dashboard-host": "0.0.0.0",
            "metrics-export-port": str(PORT_METRICS),
        },
        "template": {
            # The head holds Serve's controller and proxy: Karpenter must not drain it either.
            "metadata": {"labels": deployment_labels(spec), "annotations": serving_pod_annotations()},
            "spec": {
                "containers": [
                    {
                        "name": "ray-head",
                        "image": platform.ray_image,
                        "imagePullPolicy": "IfNotPresent",
                        "ports": [
                            container_port("gcs-server", PORT_GCS),
                            container_port("dashboard", PORT_DASHBOARD),
                            container_port("client", PORT_CLIENT),
                            container_port("serve", PORT_SERVE),
                            container_port("metrics", PORT_METRICS),
                        ],
                        "resources": {"requests": dict(resources), "limits": dict(resources)},
                    }
                ],
            },
        },
    }
    # Pinned to the CPU flavor's nodes; no GPU toleration, so never on a tainted GPU node.
    group["template"]["spec"]["nodeSelector"] = cpu_node_selector(platform)
    # Ray Serve LLM forwards HF_TOKEN from the controller's environment into the replicas'
    # runtime env, so the head needs it as well as the workers; the S3 credentials likewise
    # (storage.s3_credentials_env), and only for an s3:// source, so other pods stay as they were.
    if env := [*hf_token_env(spec), *s3_credentials_env(spec.model_source)]:
        group["template"]["spec"]["containers"][0]["env"] = env
    return group


def _worker_volumes(spec: DeploymentSpec, platform: PlatformSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts) for a GPU worker pod."""
    shm, shm_mount = shm_volume(platform)
    volumes: list[dict[str, Any]] = [shm]
    mounts: list[dict[str, Any]] = [shm_mount]
    if platform.model_cache_pvc:
        cache, cache_mount = model_cache_volume(platform)
        volumes.append(cache)
        mounts.append(cache_mount)
    if spec.model_source.startswith("pvc://"):
        claim, _ = parse_pvc_source(spec.model_source)
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
    resources = gpu_pod_resources(spec.flavor, gpus)
    node_selector = gpu_node_selector(spec.flavor)
    volumes, mounts = _worker_volumes(spec, platform)
    env = [
        {"name": "HF_HOME", "value": platform.hf_cache_path},
        *hf_token_env(spec),
        # Use InfiniBand/RoCE and GPUDirect RDMA where the nodes have them; pipeline stages
        # across nodes are otherwise limited to TCP.
        {"name": "NCCL_IB_DISABLE", "value": "0"},
        {"name": "NCCL_NET_GDR_LEVEL", "value": "2"},
        {"name": "NCCL_DEBUG", "value": platform.nccl_debug},
        # Ray Serve LLM downloads an s3:// source with the AWS CLI (`aws s3 cp`), which reads the
        # AWS_* variables: ray-project/ray python/ray/llm/_internal/common/utils/cloud_filesystem/
        # s3_filesystem.py. Nothing for any other source.
        *s3_credentials_env(spec.model_source),
    ]
    # Each replica in one block / on one host; never drained by Karpenter's own disruption.
    placement = slice_annotations(spec.flavor, pods)
    metadata: dict[str, Any] = {
        "labels": deployment_labels(spec),
        "annotations": {**placement, **serving_pod_annotations()},
    }
    return {
        "groupName": WORKER_GROUP_NAME,
        # The KubeRay autoscaler moves `replicas` between these bounds; keeping them whole
        # multiples of pods_per_replica means a replica is never left half-placed.
        "replicas": spec.min_replicas * pods,
        "minReplicas": spec.min_replicas * pods,
        "maxReplicas": spec.max_replicas * pods,
        "rayStartParams": {"metrics-export-port": str(PORT_METRICS)},
        "template": {
            "metadata": metadata,
            "spec": {
                # llm-portal.io/flavor, so Kueue can admit the group into no other flavor
                # (common.gpu_node_selector). The GPU nodes' taint is tolerated here; the
                # flavor's own tolerations stay Kueue's to inject on admission.
                "nodeSelector": node_selector,
                "tolerations": gpu_tolerations(),
                "containers": [
                    {
                        "name": "ray-worker",
                        "image": platform.ray_image,
                        "imagePullPolicy": "IfNotPresent",
                        "ports": [container_port("metrics", PORT_METRICS)],
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
    - the flavor's tolerations on pods: injected by Kueue from the admitted ResourceFlavor
      (workers tolerate only the GPU nodes' `nvidia.com/gpu` taint themselves). The pods'
      nodeSelector *is* set, to `llm-portal.io/flavor`, which Kueue injects with the same
      value: without it Kueue may admit the pods into another flavor's quota (see
      common.gpu_node_selector).

    `spec.upgradeStrategy.type` is "None": "NewCluster" brings up a second full cluster
    before tearing down the old one, i.e. 2x the deployment's GPUs during every upgrade,
    which the tenant's Kueue quota (sized for 1x) cannot admit, so upgrades would hang.
    With "None", KubeRay still applies serveConfigV2 changes in place but leaves the
    running cluster alone when rayClusterConfig changes; such a change has to be rolled
    out by deleting and recreating the RayService. Worker counts are the exception: KubeRay's
    cluster hash leaves them out, and the portal moves them on the running RayCluster
    (runtime.backends.kuberay), which Kueue admits as a workload slice.
    """
    if spec.max_replicas < max(spec.min_replicas, 1):  # the kserve renderer refuses the same shapes
        raise RenderError(
            f"max_replicas {spec.max_replicas} must be at least 1 and at least min_replicas {spec.min_replicas}"
        )
    name = rayservice_name(spec.name)
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": spec.namespace,
        "labels": {**deployment_labels(spec), **kueue_labels(spec)},
    }
    # Every RayService is an elastic Kueue job with the in-tree autoscaler, fixed-size ones too
    # (min = max): a worker-count change then moves the running RayCluster's counts, which Kueue
    # takes as a new Workload slice beside the serving one (no eviction, no gap); see
    # runtime.backends.kuberay.resize_ops for the upstream code this rests on.
    metadata["annotations"] = {ANNOTATION_ELASTIC_JOB: "true"}
    # Sized here rather than left to KubeRay's default, so the head's charge is known
    # (runtime.manifests.kueue sizes the CPU flavor's quota for head + sidecar).
    sidecar = {"cpu": platform.autoscaler_cpu, "memory": platform.autoscaler_memory}
    cluster: dict[str, Any] = {
        "rayVersion": platform.ray_version,
        "headGroupSpec": _head_group(spec, platform),
        "workerGroupSpecs": [_worker_group(spec, platform)],
        "enableInTreeAutoscaling": True,
        "autoscalerOptions": {"resources": {"requests": sidecar, "limits": dict(sidecar)}},
    }
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
