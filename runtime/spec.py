"""Frozen specs: the boundary between the database and the runtime.

The runtime never touches the ORM. Services turn rows into these immutable values
(`deployments.specs.deployment_spec`, `quotas.specs.tenant_queue_spec`) and the pure
renderers in `runtime.manifests` turn them into Kubernetes objects. Keeping them frozen
means a manifest is a function of its spec and nothing else, which is what the golden
files test.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class RenderError(ValueError):
    """A spec the runtime cannot turn into a workload: a name the controller would refuse, a
    replica wider than a node, a flavor without node labels, a model source it cannot mount.
    Retrying cannot help (the spec or its flavor must change), so the reconciler records it as
    a condition. A ValueError, so the previews and the validation that catch those still do."""


@dataclass(frozen=True)
class Toleration:
    """A Kubernetes toleration on a GPU flavor's nodes."""

    key: str
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True)
class FlavorSpec:
    """One GPU flavor: a Kueue ResourceFlavor plus the facts sizing needs."""

    name: str  # DNS-1123; the ResourceFlavor name
    gpu_model: str  # human name, e.g. "H100 SXM5"
    accelerator_type: str  # Ray Serve accelerator type, e.g. "H100", "A100"
    gpu_memory_gib: int
    gpus_per_node: int  # the NVLink domain: tensor parallel must fit inside it
    cpu_per_gpu: int = 8
    memory_gib_per_gpu: int = 64
    node_labels: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs
    tolerations: tuple[Toleration, ...] = ()
    # Node-label keys of a Kueue Topology, widest domain first, kubernetes.io/hostname last
    # (empty: no topology-aware placement). See runtime.manifests.topology.
    topology_levels: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineOptions:
    """vLLM engine options the request exposes."""

    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    enable_chunked_prefill: bool = True
    max_num_batched_tokens: int | None = None
    quantization: str | None = None  # None | "fp8" | "awq" | "gptq"
    dtype: str = "auto"  # auto | bfloat16 | float16 | float32
    # vLLM's --kv-cache-dtype (deployments.choices.KvCacheDtype); "auto" = the model's dtype, and
    # rendered only when it is not "auto", so vLLM's own default applies.
    kv_cache_dtype: str = "auto"
    trust_remote_code: bool = False


@dataclass(frozen=True)
class DeploymentSpec:
    """Everything needed to render one model deployment, and nothing from the ORM."""

    deployment_id: int
    name: str  # resource name (DNS-1123, <= manifests.rayservice.RAYSERVICE_NAME_MAX)
    namespace: str  # the tenant namespace
    tenant_slug: str
    queue_name: str  # the tenant's Kueue LocalQueue
    model_source: str  # "org/model" (Hugging Face), "s3://bucket/path" or "pvc://claim/path"
    served_model_name: str
    flavor: FlavorSpec
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    min_replicas: int = 1
    max_replicas: int = 1
    target_ongoing_requests: int = 16
    engine: EngineOptions = field(default_factory=EngineOptions)
    hf_token_secret: str | None = None  # Secret in the tenant namespace with key HF_TOKEN
    # The Hugging Face revision to load (commit id, tag or branch; catalog.sources checks it);
    # None: the default branch. vLLM --revision / Ray Serve LLM engine_kwargs.revision.
    model_revision: str | None = None
    # What the model is served for (runtime.tasks): chat, completion, embedding or score.
    task: str = "chat"
    generation: int = 1
    backend: str = "kuberay"  # kuberay | kserve | local
    # The tenant's gateway limits (runtime.manifests.gateway): 0 = no limit rendered.
    tokens_per_minute: int = 0
    requests_per_minute: int = 0
    # The Kueue WorkloadPriorityClass of its priority tier (runtime.manifests.kueue); None: none.
    priority_class: str | None = None
    # Stopped by the idle policy or the serving schedule (deployments.wake): its endpoint stays, and
    # the activator wakes it on the next request (the local gateway; runtime.gateway_local).
    wakeable: bool = False

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def autoscaling(self) -> bool:
        return self.max_replicas > self.min_replicas


@dataclass(frozen=True)
class PlatformSpec:
    """Platform-wide runtime settings (from Django settings; see portal/settings.py)."""

    ray_version: str = "2.60.0"
    ray_image: str = "rayproject/ray-llm:2.60.0-py311-cu128"
    vllm_image: str = "vllm/vllm-openai:v0.32.0"
    model_cache_pvc: str | None = "model-cache"
    hf_cache_path: str = "/home/ray/.cache/huggingface"
    nccl_debug: str = "WARN"
    shm_size_gi: int = 16
    head_cpu: str = "2"
    head_memory: str = "8Gi"
    # The Ray autoscaler sidecar KubeRay adds to the head of an autoscaling deployment; Kueue
    # charges it with the head (seen on Kueue 0.19.2 / KubeRay 1.6.2: 2500m / 8704Mi for a
    # 2 / 8Gi head, the sidecar's default being 500m / 512Mi), so the portal sets it explicitly.
    autoscaler_cpu: str = "500m"
    autoscaler_memory: str = "512Mi"
    # The CPU-only Kueue ResourceFlavor that Ray heads are charged to (and pinned to through
    # its node labels, when it has any): see runtime.manifests.kueue.
    cpu_flavor: str = "portal-cpu"
    cpu_flavor_node_labels: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs
    queueing_strategy: str = "BestEffortFIFO"  # every ClusterQueue's: BestEffortFIFO | StrictFIFO
    # Every ClusterQueue's preemption (runtime.preemption has the values and what each implies).
    reclaim_within_cohort: str = "Any"  # Never | LowerPriority | Any
    within_cluster_queue: str = "LowerPriority"  # Never | LowerPriority | LowerOrNewerEqualPriority
    # How KServe runs the kserve backend's InferenceServices: "Standard" (a Deployment) or "Knative"
    # (runtime.manifests.kserve, KSERVE_MODES).
    kserve_deployment_mode: str = "Standard"


@dataclass(frozen=True)
class GatewaySpec:
    """Where deployments are exposed (runtime.manifests.gateway): the platform Gateway their
    HTTPRoutes attach to, the public base URL, and the namespace of the API-key Secrets."""

    gateway_name: str
    gateway_namespace: str
    public_url: str  # e.g. https://llm.example.com; the endpoint is <public_url>/<tenant>/<name>/v1
    key_namespace: str


@dataclass(frozen=True)
class PriorityClassSpec:
    """A priority tier as Kueue's WorkloadPriorityClass (runtime.manifests.kueue)."""

    name: str  # the class: llm-portal-<tier>
    value: int
    description: str = ""


@dataclass(frozen=True)
class ModelPoolSpec:
    """The pods of a deployment that each run one model server, for an InferencePool: their
    labels and the port the engine serves on (the backend's answer; runtime.manifests.tenant_route)."""

    selector: tuple[tuple[str, str], ...]  # sorted (key, value) pairs
    target_port: int


@dataclass(frozen=True)
class EndpointPickerSpec:
    """The platform's endpoint picker (the Inference Extension's EPP, now llm-d-router's), one per
    pool as its inferencepool chart installs it: Service `<pool><service_suffix>`, gRPC `port`."""

    service_suffix: str = "-epp"
    port: int = 9002
    failure_mode: str = "FailClose"  # FailClose | FailOpen


@dataclass(frozen=True)
class TenantModelSpec:
    """One model on a tenant endpoint: the name clients send as `model`, and where it is served."""

    served_name: str
    deployment_id: int
    deployment_name: str  # the deployment's resource name (its InferencePool's name)
    service: str  # the backend Service (runtime.manifests.gateway.backend_service) ...
    port: int  # ... and its port
    pool: ModelPoolSpec | None = None  # None: no InferencePool, the route targets the Service
    # A consumer's limits on this shared model, one counter for the rule (its route is the
    # consumer's): 0 = none. Its own deployments have none here (the tenant's per-key limits apply).
    tokens_per_minute: int = 0
    requests_per_minute: int = 0


@dataclass(frozen=True)
class TenantRouteSpec:
    """A tenant endpoint `<public_url>/<tenant_slug>/v1` routing by model (runtime.manifests.tenant_route).

    `namespace` holds the route, its policies and every model's Service: the tenant's own namespace
    for its own deployments, or the owner's for the models another tenant shares with it (one spec
    per owner, `owner_slug` set). The portal's Service answers `/v1/models`."""

    tenant_slug: str
    namespace: str
    gateway: GatewaySpec
    models: tuple[TenantModelSpec, ...] = ()
    owner_slug: str = ""  # set: these are `owner_slug`'s models shared with `tenant_slug`
    portal_namespace: str = ""
    portal_service: str = ""
    portal_port: int = 80
    # Per key, counted on each route (runtime.manifests.gateway): 0 = none.
    tokens_per_minute: int = 0
    requests_per_minute: int = 0
    # One counter for every key on the route: a consumer's total for the models shared with it.
    route_tokens_per_minute: int = 0
    route_requests_per_minute: int = 0
    endpoint_picker: EndpointPickerSpec | None = None  # None: routes target the Services


@dataclass(frozen=True)
class FlavorQuotaSpec:
    """One flavor's quota inside a tenant's ClusterQueue (GPUs; CPU/memory follow per GPU)."""

    flavor: FlavorSpec
    nominal_gpus: int
    borrowing_limit_gpus: int | None = None  # None = unlimited borrowing within the cohort
    lending_limit_gpus: int | None = None  # None = may lend everything unused


@dataclass(frozen=True)
class TenantQueueSpec:
    """A tenant's Kueue objects: namespace, ClusterQueue in a cohort, LocalQueue."""

    tenant_slug: str
    namespace: str
    cluster_queue: str
    local_queue: str
    cohort: str
    quotas: tuple[FlavorQuotaSpec, ...] = ()


@dataclass(frozen=True)
class NodeClassSpec:
    """Where a NodePool's nodes come from: an EC2NodeClass the portal renders (AWS), or a
    reference to a node class the platform team keeps (any other Karpenter provider)."""

    aws: bool = True
    group: str = "karpenter.k8s.aws"  # the reference's group and kind off AWS
    kind: str = "EC2NodeClass"
    name: str = ""  # off AWS: the node class every NodePool names unless the flavor names one
    role: str = ""  # AWS: the IAM role of the nodes
    subnet_tags: tuple[tuple[str, str], ...] = ()  # AWS: sorted (key, value) selector tags
    security_group_tags: tuple[tuple[str, str], ...] = ()
    ami_alias: str = ""  # AWS: a pinned release, e.g. al2023@v20240807 (karpenter.ami_alias_problem)
    ami_allow_latest: bool = False  # AWS: whether "<family>@latest" may be used (it drifts every node)
    root_volume_gib: int = 200  # AWS: room for images and weights pulled onto the node


@dataclass(frozen=True)
class NodePoolSpec:
    """A Karpenter NodePool for one GPU flavor (quotas.provisioning validates the values)."""

    flavor: FlavorSpec
    gpu_limit: int  # nvidia.com/gpu the pool may hold at most: quotas.nodepools says how
    capacity_types: tuple[str, ...] = ("on-demand",)  # subset of spot / on-demand
    instance_types: tuple[str, ...] = ()  # empty: any instance with the flavor's GPUs
    consolidate_after: str = "5m"
    expire_after: str = "720h"
    node_class_name: str = ""  # off AWS: overrides NodeClassSpec.name for this flavor
