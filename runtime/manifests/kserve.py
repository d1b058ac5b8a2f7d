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
`storageUri`), the Deployment or Knative revisions, and the predictor Service.

Deployment mode (`PlatformSpec.kserve_deployment_mode`, KSERVE_DEPLOYMENT_MODE), always written
explicitly in `serving.kserve.io/deploymentMode` so that the cluster's default cannot change it.
KServe v0.20.0 knows "Standard" and "Knative" and still reads the legacy "RawDeployment" and
"Serverless" as those two (kserve/kserve v0.20.0 pkg/constants/constants.go, ParseDeploymentMode);
the portal writes the current names.
- **Standard** (the default, KServe's own default too): KServe makes a Deployment `<name>-predictor`
  and a Service of the same name (port 80 to the container's port), nothing else. Its only
  autoscalers are the HPA on CPU/memory and KEDA (pkg/controller/v1beta1/inferenceservice/
  reconcilers/autoscaler): neither measures requests in flight, so the portal runs a fixed
  number of replicas (`serving.kserve.io/autoscalerClass: none`, the Deployment's replicas are
  then `minReplicas`: reconcilers/deployment/deployment_reconciler.go) and refuses autoscaling
  bounds and scale to zero (the HPA raises a minimum below 1 to 1: reconcilers/hpa/hpa_reconciler.go).
- **Knative**: a Knative Service; `scaleMetric: concurrency` / `scaleTarget` drive the Knative pod
  autoscaler, which can scale to zero. It needs Knative Serving with the `kubernetes.podspec-*`
  features the pod uses (runtime.readiness.knative), and it cannot sit behind the portal's
  Gateway (`predictor_service`). Knative's queue-proxy sidecar requests CPU of its own; the
  container asks that much less so the pod costs what the quota holds (`KNATIVE_QUEUE_PROXY_CPU`).

Scale to zero and quota (Knative mode): the portal keeps a scaled-to-zero deployment's GPUs
reserved in the tenant's quota. With no pods, Kueue sees the GPUs as free and admits other work
into them; the deployment's next cold start would then wait in the queue (or never fit).

What Kueue charges: each predictor pod is its own Workload (Kueue's pod integration), charged the
pod's requests: the larger of its containers' sum and any init container, plus overhead
(kubernetes-sigs/kueue v0.19.2 pkg/workload/workload.go, via k8s.io/component-helpers
resource.PodRequests). KServe adds nothing to the predictor pod in either mode by default but the
storage initializer, an init container for `s3://` (100m CPU / 100Mi, the install's
`storageInitializer` defaults in its inferenceservice-config), which is smaller than the
container, so it adds nothing to the charge; `pvc://` is mounted without one (kserve/kserve
v0.20.0 pkg/webhook/admission/pod/storage_initializer_injector.go). `pod_requests` computes it.

The portal's own annotations (generation, spec hash, exposure) are on the InferenceService, and
KServe copies every InferenceService annotation onto the pod template unless the install lists it
in `inferenceService.serviceAnnotationDisallowedList` (components/predictor.go,
buildPredictorResources): without that, a limit change rolls the GPU pods. `PORTAL_ANNOTATIONS`
is the list the install must name (docs/install.md; runtime.readiness.knative checks it).

The predictor is one pod per replica, so TP x PP GPUs must fit on one node; multi-node
replicas need the kuberay backend. The InferenceService's labels (including the Kueue queue
name) are copied onto its pods, and Kueue's pod integration injects the admitted
ResourceFlavor's node labels and tolerations. The predictor selects `llm-portal.io/flavor`
itself all the same, or Kueue could admit it into another flavor's quota
(`common.gpu_node_selector`); of tolerations it sets only the GPU nodes' taint.
"""

from __future__ import annotations

from typing import Any

from runtime.manifests.common import (
    ANNOTATION_EXPOSURE,
    ANNOTATION_GENERATION,
    ANNOTATION_SPEC_HASH,
    container_port,
    deployment_labels,
    gpu_node_selector,
    gpu_pod_resources,
    gpu_tolerations,
    hf_token_env,
    kueue_labels,
    model_cache_volume,
    parse_pvc_source,
    placement_error,
    shm_volume,
)
from runtime.manifests.karpenter import serving_pod_annotations
from runtime.manifests.kserve_status import FAILURE_REASONS, kserve_status  # noqa: F401  (the status read back)
from runtime.manifests.syntax import DNS1035_LABEL
from runtime.manifests.topology import single_pod_annotations
from runtime.spec import DeploymentSpec, PlatformSpec, RenderError
from runtime.tasks import engine_flags, pools

KSERVE_API_VERSION = "serving.kserve.io/v1beta1"

# KServe requires the main container of a custom predictor to have this name: it is where
# the storage initializer's mount and STORAGE_URI are looked up.
CONTAINER_NAME = "kserve-container"
MODEL_DIR = "/mnt/models"
# KServe's predictor Service (Standard mode) and Knative both route to the container's first
# port; vLLM serves the OpenAI API and /metrics on its one HTTP port, so Prometheus scrapes it too.
PORT_HTTP = 8080
METRICS_PATH = "/metrics"
# The Standard-mode predictor Service `<name>-predictor`: port 80 to the container's first port
# (kserve/kserve v0.20.0 pkg/controller/v1beta1/inferenceservice/reconcilers/service/
# service_reconciler.go, createDefaultSvc: constants.CommonDefaultHttpPort).
PREDICTOR_SERVICE_PORT = 80

MODE_STANDARD = "Standard"
MODE_KNATIVE = "Knative"
KSERVE_MODES = (MODE_STANDARD, MODE_KNATIVE)
ANNOTATION_DEPLOYMENT_MODE = "serving.kserve.io/deploymentMode"
# "none": no HPA, and the Deployment's replicas are the predictor's minReplicas.
ANNOTATION_AUTOSCALER_CLASS = "serving.kserve.io/autoscalerClass"
# The InferenceService labels KServe puts on the predictor's pods in both modes (components/
# predictor.go, buildObjectMeta: constants.InferenceServicePodLabelKey, KServiceComponentLabel).
LABEL_ISVC = "serving.kserve.io/inferenceservice"
LABEL_COMPONENT = "component"
# The portal's annotations, which the install keeps off the pod template (module docstring).
PORTAL_ANNOTATIONS = (ANNOTATION_GENERATION, ANNOTATION_SPEC_HASH, ANNOTATION_EXPOSURE)

# Knative mode only. Knative aims at 70% of the target by default; 100 makes scaleTarget mean
# what Ray Serve's target_ongoing_requests means, so the two backends scale alike for the same spec.
ANNOTATION_TARGET_UTILIZATION = "autoscaling.knative.dev/target-utilization-percentage"
# A revision whose pod is not ready within Knative's default 10 minutes is marked failed;
# pulling a vLLM image and loading tens of GB of weights routinely takes longer.
ANNOTATION_PROGRESS_DEADLINE = "serving.knative.dev/progress-deadline"
PROGRESS_DEADLINE = "1800s"
# Knative's queue-proxy sidecar requests 25m CPU and no memory unless config-deployment says
# otherwise (knative/serving v0.48.1, the module KServe v0.20.0 builds with: pkg/deployment/
# config.go, QueueSidecarCPURequestDefault; QueueSidecarMemoryRequest unset).
KNATIVE_QUEUE_PROXY_CPU_MILLIS = 25

# Names: `<name>-predictor-00001` (the Knative revision; the Standard Deployment and Service are
# `<name>-predictor`) must be a DNS-1123 label (63 characters); KServe also requires the name to
# start with a letter (DNS-1035). One limit for both modes, so switching mode renames nothing.
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


def predictor_service(spec: DeploymentSpec, mode: str = MODE_STANDARD) -> tuple[str, int]:
    """(Service, port) a Gateway HTTPRoute sends the deployment's traffic to.

    Standard mode: KServe's `<name>-predictor` Service, port 80 (to the container's 8080).
    Knative mode has no such Service: `<name>-predictor` is then Knative's ExternalName
    placeholder, which only the Knative ingress answers, by Host header (a route through it gets
    404), and the Services that do reach pods belong to one revision each
    (`<name>-predictor-00001-private`) and change with every rollout, bypassing the activator that
    wakes a scaled-to-zero revision. RenderError: the portal does not expose Knative-mode
    deployments on its Gateway.
    """
    if mode == MODE_STANDARD:
        return f"{spec.name}-predictor", PREDICTOR_SERVICE_PORT
    if mode == MODE_KNATIVE:
        raise RenderError(
            "KServe's Knative mode cannot be exposed on the portal's Gateway: its only stable Service, "
            f"{spec.name}-predictor, is Knative's ExternalName placeholder that routes by Host header, and each "
            "revision's own Service changes with every rollout. Use KSERVE_DEPLOYMENT_MODE=Standard, or unset "
            "GATEWAY_PUBLIC_URL."
        )
    raise RenderError(f"KServe deployment mode {mode!r} is not one of {', '.join(KSERVE_MODES)}")


def deployment_mode(platform: PlatformSpec) -> str:
    """The platform's KServe mode, or RenderError for one the portal does not render."""
    mode = platform.kserve_deployment_mode
    if mode not in KSERVE_MODES:
        raise RenderError(f"KServe deployment mode {mode!r} is not one of {', '.join(KSERVE_MODES)}")
    return mode


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
    if pools(spec.task):  # runtime.tasks: the pooling runner; chunked prefill is vLLM's to decide
        args += engine_flags(spec.task)
    else:  # explicit either way: vLLM's default differs between versions and engines
        args.append("--enable-chunked-prefill" if engine.enable_chunked_prefill else "--no-enable-chunked-prefill")
    if engine.max_num_batched_tokens is not None:
        args.append(f"--max-num-batched-tokens={engine.max_num_batched_tokens}")
    if engine.quantization:
        args.append(f"--quantization={engine.quantization}")
    args.append(f"--dtype={engine.dtype}")
    if engine.kv_cache_dtype != "auto":  # vLLM's default: the model's dtype
        args.append(f"--kv-cache-dtype={engine.kv_cache_dtype}")
    if engine.trust_remote_code:
        args.append("--trust-remote-code")
    if spec.model_revision:  # the pinned Hugging Face revision (issue 33), for the code too when it runs
        args.append(f"--revision={spec.model_revision}")
        if engine.trust_remote_code:
            args.append(f"--code-revision={spec.model_revision}")
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


def _container(spec: DeploymentSpec, platform: PlatformSpec, mode: str) -> dict[str, Any]:
    resources = gpu_pod_resources(spec.flavor, kserve_gpus_per_pod(spec))
    requests = dict(resources)
    if mode == MODE_KNATIVE:  # queue-proxy's request makes up the rest of the flavor's CPU share
        requests["cpu"] = f"{int(resources['cpu']) * 1000 - KNATIVE_QUEUE_PROXY_CPU_MILLIS}m"
    _, mounts = _volumes(spec, platform)
    return {
        "name": CONTAINER_NAME,
        "image": platform.vllm_image,
        "imagePullPolicy": "IfNotPresent",
        # The module path, not the image's entrypoint: it is the same across vLLM versions.
        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "args": vllm_args(spec),
        # One port (Knative allows no more); "http1" tells Knative the protocol and names the
        # Standard-mode Service's port.
        "ports": [container_port("http1", PORT_HTTP)],
        "env": _env(spec, platform),
        "resources": {"requests": requests, "limits": dict(resources)},
        # /health answers 200 only once the engine has loaded the model; KServe's default TCP
        # probe would route traffic to a server that is still loading.
        "readinessProbe": {"httpGet": {"path": "/health", "port": PORT_HTTP}, "periodSeconds": 10},
        "volumeMounts": mounts,
    }


def pod_requests(spec: DeploymentSpec, platform: PlatformSpec) -> tuple[int, int]:
    """(millicores, bytes) Kueue charges one predictor pod: the larger of the containers' sum
    (with Knative's queue-proxy) and the storage initializer of an `s3://` source, the install's
    default 100m / 100Mi (module docstring). Equal to the flavor's share for the pod's GPUs."""
    mode = deployment_mode(platform)
    requests = _container(spec, platform, mode)["resources"]["requests"]
    cpu, memory = _millis(requests["cpu"]), _bytes(requests["memory"])
    if mode == MODE_KNATIVE:
        cpu += KNATIVE_QUEUE_PROXY_CPU_MILLIS
    if (_storage_uri(spec) or "").startswith("s3://"):
        cpu, memory = max(cpu, STORAGE_INITIALIZER_CPU_MILLIS), max(memory, STORAGE_INITIALIZER_MEMORY_BYTES)
    return cpu, memory


# The storage initializer's requests in the KServe install's inferenceservice-config
# (`storageInitializer`: cpuRequest 100m, memoryRequest 100Mi in ../shared/k8s, KServe v0.20.0).
STORAGE_INITIALIZER_CPU_MILLIS = 100
STORAGE_INITIALIZER_MEMORY_BYTES = 100 * 2**20


def _millis(value: int | str) -> int:
    text = str(value)
    return int(text[:-1]) if text.endswith("m") else int(text) * 1000


def _bytes(value: int | str) -> int:
    text = str(value)
    return int(text[:-2]) * 2**30 if text.endswith("Gi") else int(text)


def _replicas(spec: DeploymentSpec, mode: str) -> dict[str, Any]:
    """The predictor's replica fields, or RenderError for bounds the mode cannot keep."""
    if spec.max_replicas < max(spec.min_replicas, 1):
        raise RenderError(
            f"max_replicas {spec.max_replicas} must be at least 1 and at least min_replicas {spec.min_replicas}"
        )
    if mode == MODE_KNATIVE:
        return {
            "minReplicas": spec.min_replicas,
            "maxReplicas": spec.max_replicas,
            "scaleMetric": "concurrency",
            "scaleTarget": spec.target_ongoing_requests,
        }
    if spec.min_replicas == 0:
        raise RenderError(
            "min_replicas 0 (scale to zero) needs KServe's Knative mode: in Standard mode KServe runs a "
            "Deployment, which never scales to zero (set min replicas to at least 1, or use the kuberay backend)"
        )
    if spec.autoscaling:
        raise RenderError(
            f"replicas {spec.min_replicas} to {spec.max_replicas}: in KServe's Standard mode the portal runs a "
            "fixed number of replicas (KServe scales a Deployment only on CPU or memory, which say nothing of "
            "a GPU engine's load); set min = max replicas, or use the kuberay backend to autoscale"
        )
    return {"minReplicas": spec.min_replicas, "maxReplicas": spec.max_replicas}


def _pod_annotations(spec: DeploymentSpec, mode: str) -> dict[str, str]:
    annotations = {
        # Prometheus' kubernetes_sd pod role reads them. KServe's own `enable-prometheus-scraping`
        # would move the port to its aggregating sidecar.
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(PORT_HTTP),
        "prometheus.io/path": METRICS_PATH,
    }
    if mode == MODE_KNATIVE:
        annotations[ANNOTATION_TARGET_UTILIZATION] = "100"
        annotations[ANNOTATION_PROGRESS_DEADLINE] = PROGRESS_DEADLINE
    return {
        **annotations,
        # One replica, one pod, one host (runtime.manifests.topology); none without a Topology.
        **single_pod_annotations(spec.flavor),
        # Never drained by Karpenter's own disruption (runtime.manifests.karpenter). KServe puts
        # these on the predictor pod (kserve/kserve v0.20.0 pkg/apis/serving/v1beta1/component.go,
        # ComponentExtensionSpec.Annotations).
        **serving_pod_annotations(),
    }


def render_inferenceservice(spec: DeploymentSpec, platform: PlatformSpec) -> dict[str, Any]:
    """The InferenceService for `spec` in the platform's KServe mode: one vLLM pod per replica.

    Standard: a fixed number of replicas (min == max, at least 1). Knative: concurrency
    autoscaling between the bounds, `min_replicas == 0` scales to zero when idle (see the module
    docstring for why the portal keeps the GPUs reserved). Raises RenderError for bounds the mode
    cannot keep, a replica larger than one node, a name KServe would refuse, or an unsupported
    model source.
    """
    mode = deployment_mode(platform)
    name = inferenceservice_name(spec.name)
    volumes, _ = _volumes(spec, platform)
    predictor: dict[str, Any] = {
        **_replicas(spec, mode),
        "annotations": _pod_annotations(spec, mode),
        # Pins the predictor pods to the reserved flavor; Kueue injects its tolerations.
        "nodeSelector": gpu_node_selector(spec.flavor),
        "tolerations": gpu_tolerations(),
        "containers": [_container(spec, platform, mode)],
        "volumes": volumes,
    }
    # Explicit, so the cluster's default mode cannot change how a deployment runs.
    annotations = {ANNOTATION_DEPLOYMENT_MODE: mode}
    if mode == MODE_STANDARD:
        annotations[ANNOTATION_AUTOSCALER_CLASS] = "none"
    return {
        "apiVersion": KSERVE_API_VERSION,
        "kind": "InferenceService",
        "metadata": {
            "name": name,
            "namespace": spec.namespace,
            # KServe copies these onto the predictor pods, where Kueue reads the queue name.
            "labels": {**deployment_labels(spec), **kueue_labels(spec)},
            "annotations": annotations,
        },
        "spec": {"predictor": predictor},
    }
