"""The kserve backend's object: a vLLM InferenceService for a deployment, and its status read back.

Pure like the rest of `runtime.manifests`: functions of frozen specs (or of a status dict), no
ORM, no I/O, no `kubernetes` import. `runtime.k8s` applies what `render_inferenceservice` returns.

Why a `containers` predictor running the platform's vLLM image, not `model.modelFormat:
huggingface`: the CRD (KServe v0.20) accepts both, but the Hugging Face ServingRuntime wraps
vLLM in KServe's own server with its own flags (`--model_name`, `--model_dir`, a partial
pass-through of engine args). With the container we pass vLLM's own CLI flags, run exactly
the image the platform pins (`PlatformSpec.vllm_image`), depend on no ServingRuntime being
installed, and scrape the same `vllm:*` metrics the local backend serves. KServe still does
what it is good at: the storage initializer (`STORAGE_URI`, the custom-container form of
`storageUri`), Knative revisions, routing and concurrency autoscaling.

Model sources:
- `s3://…` and `pvc://claim/path` go to `STORAGE_URI`; KServe downloads (S3, with the
  namespace ServiceAccount's credentials) or mounts (PVC, read-only) them at /mnt/models.
- A Hugging Face id is passed to vLLM as `--model org/name`. KServe v0.20 does support
  `hf://org/name`, but its storage initializer takes HF_TOKEN only from a Secret attached
  to the pod's ServiceAccount (one account per token) and re-downloads the whole repository
  into an emptyDir on every pod start, i.e. on every scale-up from zero. vLLM downloads
  into HF_HOME on the shared model-cache PVC with the deployment's own HF_TOKEN, which is
  what the kuberay backend does too.

Scaling is Knative's (Serverless mode, set explicitly): KServe maps `scaleMetric:
concurrency` / `scaleTarget` to the Knative pod autoscaler, which is also the only mode
that can scale to zero; the HPA of the Standard (raw) mode scales on CPU/memory only.

Scale to zero and quota: the portal keeps a scaled-to-zero deployment's GPUs reserved in
the tenant's quota. With no pods, Kueue sees the GPUs as free and admits other work into
them; the deployment's next cold start would then wait in the queue (or never fit).

The predictor is one pod per replica, so TP x PP GPUs must fit on one node; multi-node
replicas need the kuberay backend. The InferenceService's labels (including the Kueue queue
name) are copied onto its pods, and Kueue's pod integration injects the admitted
ResourceFlavor's node labels and tolerations. The predictor selects `llm-portal.io/flavor`
itself all the same, or Kueue could admit it into another flavor's quota
(`common.gpu_node_selector`); of tolerations it sets only the GPU nodes' taint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime.manifests.common import (
    LABEL_QUEUE_NAME,
    container_port,
    deployment_labels,
    gpu_node_selector,
    gpu_pod_resources,
    gpu_tolerations,
    hf_token_env,
    model_cache_volume,
    parse_pvc_source,
    placement_error,
    shm_volume,
)
from runtime.manifests.karpenter import serving_pod_annotations
from runtime.manifests.syntax import DNS1035_LABEL
from runtime.manifests.topology import single_pod_annotations
from runtime.spec import DeploymentSpec, PlatformSpec, RenderError

KSERVE_API_VERSION = "serving.kserve.io/v1beta1"

# KServe requires the main container of a custom predictor to have this name: it is where
# the storage initializer's mount and STORAGE_URI are looked up.
CONTAINER_NAME = "kserve-container"
MODEL_DIR = "/mnt/models"
# Knative routes to the container's single port, 8080 by default; vLLM serves the OpenAI API
# and /metrics on its one HTTP port, so Prometheus scrapes this port too.
PORT_HTTP = 8080
METRICS_PATH = "/metrics"

ANNOTATION_DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
DEPLOYMENT_MODE = "Serverless"
# Knative aims at 70% of the target by default; 100 makes scaleTarget mean what Ray Serve's
# target_ongoing_requests means, so the two backends scale alike for the same spec.
ANNOTATION_TARGET_UTILIZATION = "autoscaling.knative.dev/target-utilization-percentage"
# A revision whose pod is not ready within Knative's default 10 minutes is marked failed;
# pulling a vLLM image and loading tens of GB of weights routinely takes longer.
ANNOTATION_PROGRESS_DEADLINE = "serving.knative.dev/progress-deadline"
PROGRESS_DEADLINE = "1800s"

# The Knative revision is named `<name>-predictor-00001`, which must be a DNS-1123 label
# (63 characters); KServe also requires the name to start with a letter (DNS-1035).
INFERENCESERVICE_NAME_MAX = 63 - len("-predictor-00001")


# ---------------------------------------------------------------------------------------------
# InferenceService
# ---------------------------------------------------------------------------------------------


def inferenceservice_name(deployment_name: str) -> str:
    """The InferenceService name for a deployment, or RenderError when KServe would refuse it."""
    if len(deployment_name) > INFERENCESERVICE_NAME_MAX:
        raise RenderError(
            f"InferenceService name {deployment_name!r} is {len(deployment_name)} characters; "
            f"KServe's Knative revision names allow at most {INFERENCESERVICE_NAME_MAX}"
        )
    if not DNS1035_LABEL.fullmatch(deployment_name):
        raise RenderError(
            f"InferenceService name {deployment_name!r} is not a DNS-1035 label "
            "(lowercase letters, digits and '-', starting with a letter)"
        )
    return deployment_name


def kserve_gpus_per_pod(spec: DeploymentSpec) -> int:
    """GPUs the single predictor pod needs (TP x PP), or RenderError when no node has them."""
    problem = placement_error(
        tensor_parallel_size=spec.tensor_parallel_size,
        pipeline_parallel_size=spec.pipeline_parallel_size,
        gpus_per_node=spec.flavor.gpus_per_node,
        flavor=spec.flavor.name,
        whole_node_pods=False,
    )
    if problem:
        raise RenderError(problem)
    gpus = spec.gpus_per_replica
    return gpus


def _storage_uri(spec: DeploymentSpec) -> str | None:
    """What KServe's storage initializer fetches or mounts, or None for a Hugging Face id."""
    source = spec.model_source
    if source.startswith("pvc://"):
        parse_pvc_source(source)  # refuses an invalid claim name before the cluster does
        return source
    if source.startswith("s3://"):
        return source
    if "://" in source:
        raise RenderError(f"model source {source!r}: only s3://, pvc:// or a Hugging Face id")
    return None


def vllm_args(spec: DeploymentSpec) -> list[str]:
    """The vLLM OpenAI server's command-line flags for `spec`.

    Unset options are left out so that vLLM's defaults apply (`--max-model-len` from the
    model's config), matching what `manifests.rayservice.llm_config` leaves out for Ray Serve LLM.
    """
    engine = spec.engine
    model = MODEL_DIR if _storage_uri(spec) else spec.model_source
    args = [
        f"--model={model}",
        f"--served-model-name={spec.served_model_name}",
        f"--port={PORT_HTTP}",
        f"--tensor-parallel-size={spec.tensor_parallel_size}",
        f"--pipeline-parallel-size={spec.pipeline_parallel_size}",
    ]
    if engine.max_model_len is not None:
        args.append(f"--max-model-len={engine.max_model_len}")
    args.append(f"--gpu-memory-utilization={engine.gpu_memory_utilization}")
    # Explicit either way: vLLM's default differs between versions and engines.
    args.append("--enable-chunked-prefill" if engine.enable_chunked_prefill else "--no-enable-chunked-prefill")
    if engine.max_num_batched_tokens is not None:
        args.append(f"--max-num-batched-tokens={engine.max_num_batched_tokens}")
    if engine.quantization:
        args.append(f"--quantization={engine.quantization}")
    args.append(f"--dtype={engine.dtype}")
    if engine.trust_remote_code:
        args.append("--trust-remote-code")
    return args


def _env(spec: DeploymentSpec, platform: PlatformSpec) -> list[dict[str, Any]]:
    storage_uri = _storage_uri(spec)
    env: list[dict[str, Any]] = []
    if storage_uri:
        env.append({"name": "STORAGE_URI", "value": storage_uri})
    elif platform.model_cache_pvc:
        env.append({"name": "HF_HOME", "value": platform.hf_cache_path})
    env += hf_token_env(spec)
    env.append({"name": "NCCL_DEBUG", "value": platform.nccl_debug})
    return env


def _volumes(spec: DeploymentSpec, platform: PlatformSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts): /dev/shm always, the HF cache for Hugging Face ids.

    Weights from STORAGE_URI are mounted by KServe's webhook, not here. The cache is a PVC
    in the pod template, which Knative accepts only with its
    `kubernetes.podspec-persistent-volume-claim` and `-write` features enabled.
    """
    shm, shm_mount = shm_volume(platform)
    volumes: list[dict[str, Any]] = [shm]
    mounts: list[dict[str, Any]] = [shm_mount]
    if platform.model_cache_pvc and _storage_uri(spec) is None:
        cache, cache_mount = model_cache_volume(platform)
        volumes.append(cache)
        mounts.append(cache_mount)
    return volumes, mounts


def _container(spec: DeploymentSpec, platform: PlatformSpec) -> dict[str, Any]:
    resources = gpu_pod_resources(spec.flavor, kserve_gpus_per_pod(spec))
    _, mounts = _volumes(spec, platform)
    return {
        "name": CONTAINER_NAME,
        "image": platform.vllm_image,
        "imagePullPolicy": "IfNotPresent",
        # The module path, not the image's entrypoint: it is the same across vLLM versions.
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": vllm_args(spec),
        # Knative allows one port; "http1" tells it the protocol.
        "ports": [container_port("http1", PORT_HTTP)],
        "env": _env(spec, platform),
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        # /health answers 200 only once the engine has loaded the model; Knative's default
        # TCP probe would route traffic to a server that is still loading.
        "readinessProbe": {"httpGet": {"path": "/health", "port": PORT_HTTP}, "periodSeconds": 10},
        "volumeMounts": mounts,
    }


def render_inferenceservice(spec: DeploymentSpec, platform: PlatformSpec) -> dict[str, Any]:
    """The InferenceService for `spec`: one vLLM pod per replica, scaled by Knative.

    `min_replicas == 0` scales to zero when idle (see the module docstring for why the
    portal keeps the GPUs reserved). Raises RenderError for a replica larger than one node,
    a name KServe would refuse, or an unsupported model source.
    """
    name = inferenceservice_name(spec.name)
    if spec.max_replicas < max(spec.min_replicas, 1):
        raise RenderError(
            f"max_replicas {spec.max_replicas} must be at least 1 and at least min_replicas {spec.min_replicas}"
        )
    volumes, _ = _volumes(spec, platform)
    predictor: dict[str, Any] = {
        "minReplicas": spec.min_replicas,
        "maxReplicas": spec.max_replicas,
        "scaleMetric": "concurrency",
        "scaleTarget": spec.target_ongoing_requests,
        # Pod annotations: Prometheus' kubernetes_sd pod role reads them. KServe's own
        # `enable-prometheus-scraping` would move the port to its aggregating sidecar.
        "annotations": {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(PORT_HTTP),
            "prometheus.io/path": METRICS_PATH,
            ANNOTATION_TARGET_UTILIZATION: "100",
            ANNOTATION_PROGRESS_DEADLINE: PROGRESS_DEADLINE,
            # One replica, one pod, one host (runtime.manifests.topology); none without a Topology.
            **single_pod_annotations(spec.flavor),
            # Never drained by Karpenter's own disruption (runtime.manifests.karpenter). KServe puts
            # these on the predictor pod (kserve/kserve v0.20.0 pkg/apis/serving/v1beta1/component.go,
            # ComponentExtensionSpec.Annotations).
            **serving_pod_annotations(),
        },
        # Pins the predictor pods to the reserved flavor; Kueue injects its tolerations.
        "nodeSelector": gpu_node_selector(spec.flavor),
        "tolerations": gpu_tolerations(),
        "containers": [_container(spec, platform)],
        "volumes": volumes,
    }
    return {
        "apiVersion": KSERVE_API_VERSION,
        "kind": "InferenceService",
        "metadata": {
            "name": name,
            "namespace": spec.namespace,
            # KServe copies these onto the predictor pods, where Kueue reads the queue name.
            "labels": {**deployment_labels(spec), LABEL_QUEUE_NAME: spec.queue_name},
            # Explicit, so a cluster whose default is Standard (raw) mode cannot silently drop
            # concurrency scaling and scale-to-zero.
            "annotations": {ANNOTATION_DEPLOYMENT_MODE: DEPLOYMENT_MODE},
        },
        "spec": {"predictor": predictor},
    }


# ---------------------------------------------------------------------------------------------
# Status
# ---------------------------------------------------------------------------------------------

# Condition reasons that mean "this will not become ready by waiting": a failed Knative
# revision (image missing, crash, progress deadline), or KServe unable to create it at all
# (e.g. an admission webhook refused the pod template).
FAILURE_REASONS = frozenset(
    {
        "RevisionFailed",
        "ProgressDeadlineExceeded",
        "ContainerMissing",
        "ReconcileFailed",
        "InvalidGPUAllocation",
        "InvalidWorkerSpecNotSet",
    }
)
# Most specific first: the first one that is not True explains why Ready is not.
_CONDITION_ORDER = (
    "PredictorConfigurationReady",
    "PredictorRouteReady",
    "PredictorReady",
    "IngressReady",
    "LatestDeploymentReady",
    "RoutesReady",
    "Ready",
)
_MODEL_FAILED_TRANSITIONS = frozenset({"BlockedByFailedLoad", "InvalidSpec"})
_RAW_MODES = frozenset({"RawDeployment", "Standard"})


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or [] if "type" in c}


def _model_failure(model_status: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) when KServe reports that the model failed to load, else None."""
    states = model_status.get("states") or {}
    model_states = (states.get("activeModelState"), states.get("targetModelState"))
    transition = model_status.get("transitionStatus")
    if transition not in _MODEL_FAILED_TRANSITIONS and "FailedToLoad" not in model_states:
        return None
    info = model_status.get("lastFailureInfo") or {}
    message = info.get("message") or "the model failed to load"
    if info.get("exitCode"):
        message = f"{message} (exit code {info['exitCode']})"
    return info.get("reason") or "ModelLoadFailed", message


def _url(status: dict[str, Any]) -> str | None:
    """The external URL, else the cluster-local address."""
    return status.get("url") or (status.get("address") or {}).get("url") or None


def _first_condition(
    conditions: dict[str, dict[str, Any]], test: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    """The most specific condition (in _CONDITION_ORDER) for which `test` holds."""
    return next((conditions[t] for t in _CONDITION_ORDER if t in conditions and test(conditions[t])), None)


def _explain(
    conditions: dict[str, dict[str, Any]], model_status: dict[str, Any], ready: bool | None
) -> tuple[bool, str, str]:
    """(failed, reason, message): a model failure, then a failed condition, then whatever
    condition is not True yet, in that order of importance."""
    model_failure = _model_failure(model_status)
    if model_failure is not None:
        return True, *model_failure
    failed = _first_condition(conditions, lambda c: c.get("status") == "False" and c.get("reason") in FAILURE_REASONS)
    if failed is not None:
        return True, failed["reason"], failed.get("message", "")
    waiting = _first_condition(conditions, lambda c: c.get("status") != "True")
    if waiting is not None:
        reason = waiting.get("reason") or f"{waiting['type']}{waiting.get('status', 'Unknown')}"
        return False, reason, waiting.get("message", "")
    if ready:
        return False, "Ready", ""
    return False, "Pending", "KServe has not reported a status yet"


def kserve_status(obj: dict[str, Any]) -> dict[str, Any]:
    """What an InferenceService's status says, in the portal's terms.

    Returns `{"ready", "failed", "reason", "message", "url", "scaled_to_zero"}`:
    - ready: the `Ready` condition (True/False), None while absent or Unknown.
    - failed: the model failed to load (`modelStatus`), or a condition is False for a reason
      waiting will not fix (FAILURE_REASONS). Ready=False alone is not a failure: KServe
      reports it for a stopped service and while a raw deployment starts.
    - scaled_to_zero: Serverless, Ready, and KServe counts no ready pods
      (`modelStatus.copies.totalCopies` is 0 or omitted). Also true while the first pod of
      a scale-up from zero is still loading.

    `status.observedGeneration` is deliberately not compared with `metadata.generation`:
    KServe copies the Knative Service's generation into it, not the InferenceService's.
    """
    status = obj.get("status") or {}
    conditions = _conditions(status)
    model_status = status.get("modelStatus") or {}
    ready = {"True": True, "False": False}.get((conditions.get("Ready") or {}).get("status", ""))
    failed, reason, message = _explain(conditions, model_status, ready)

    copies = model_status.get("copies")
    scaled_to_zero = bool(
        ready
        and status.get("deploymentMode") not in _RAW_MODES
        and isinstance(copies, dict)
        and not copies.get("totalCopies")
    )
    if scaled_to_zero and reason == "Ready":
        reason, message = "ScaledToZero", "no pods; the next request starts one"
    return {
        "ready": ready,
        "failed": failed,
        "reason": reason,
        "message": message,
        "url": _url(status),
        "scaled_to_zero": scaled_to_zero,
    }
