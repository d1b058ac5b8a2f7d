"""Model deployments and their lifecycle events."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from catalog.choices import Task
from deployments.choices import (
    Dtype,
    EventType,
    KvCacheDtype,
    Quantization,
    RevisionStatus,
    ServingProfile,
    State,
    backend_choices,
    default_backend,
)
from deployments.limits import LIMITS
from quotas.models import GpuFlavor, Tenant, TenantOwnedQuerySet
from quotas.validators import validate_dns1035_label
from runtime.tasks import generates

# The fields a request sets and a spec update may change (services, serializers and the API list).
SPEC_FIELDS = (
    "model_source",
    "model_revision",
    "task",
    "served_model_name",
    "hf_token_secret",
    "flavor",
    "backend",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "min_replicas",
    "max_replicas",
    "target_ongoing_requests",
    "max_model_len",
    "gpu_memory_utilization",
    "enable_chunked_prefill",
    "max_num_batched_tokens",
    "quantization",
    "dtype",
    "kv_cache_dtype",
    "parameter_count_b",
    "serving_profile",  # a label (deployments.profiles): changes nothing that runs
    "priority_tier",  # Kueue's priority for its workload (quotas.tier_models)
)


# How each spec field reads on pages, in diffs and in revision messages.
SPEC_LABELS = {
    "model_source": "Model source",
    "model_revision": "Model revision",
    "task": "Task",
    "served_model_name": "Served model name",
    "hf_token_secret": "Hugging Face token secret",
    "flavor": "Hardware (GPU flavor)",
    "backend": "Backend",
    "tensor_parallel_size": "Tensor parallel",
    "pipeline_parallel_size": "Pipeline parallel",
    "min_replicas": "Minimum replicas",
    "max_replicas": "Maximum replicas",
    "target_ongoing_requests": "Target ongoing requests per replica",
    "max_model_len": "Max model length",
    "gpu_memory_utilization": "GPU memory utilization",
    "enable_chunked_prefill": "Chunked prefill",
    "max_num_batched_tokens": "Max batched tokens",
    "quantization": "Quantization",
    "dtype": "Weights dtype",
    "kv_cache_dtype": "KV cache dtype",
    "parameter_count_b": "Parameters (billions)",
    "serving_profile": "Serving profile",
    "priority_tier": "Priority tier",
}


class DeploymentQuerySet(TenantOwnedQuerySet):
    def live(self):
        from deployments.states import GONE

        return self.exclude(state__in=GONE)


class ModelDeployment(models.Model):
    """One LLM endpoint a tenant asked for: the spec, the lifecycle state and what was observed.

    The spec fields on this row are those of the revision that runs: the serving revision once
    one was approved (`serving_revision`), revision 1 (or its latest edit) before that. Only the
    revision services write them, by applying an approved revision, so everything that renders
    or sizes what runs reads the row. A proposed change lives in its DeploymentRevision only.

    `generation` counts changes to the row's spec; `observed_generation` is the generation the
    runtime last converged. The badge shown in the UI is derived from `state` and `conditions`.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="deployments")
    name = models.CharField(max_length=40, validators=[validate_dns1035_label])
    # --- spec -----------------------------------------------------------------------------------
    model_source = models.CharField(max_length=500)
    model_revision = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text="The Hugging Face revision the engine loads (commit id, tag or branch; empty: the default branch). "
        "Taken from the catalog model the request names.",
    )
    task = models.CharField(
        max_length=12,
        choices=Task.choices,
        default=Task.CHAT,
        help_text="What the model is served for: chat, completion, embedding or score (rerank). "
        "Embedding and score run vLLM's pooling runner.",
    )
    served_model_name = models.CharField(max_length=200)
    hf_token_secret = models.CharField(max_length=253, blank=True)
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="deployments")
    backend = models.CharField(max_length=20, choices=backend_choices, default=default_backend)
    tensor_parallel_size = models.PositiveSmallIntegerField(
        default=1, validators=LIMITS["tensor_parallel_size"].validators()
    )
    pipeline_parallel_size = models.PositiveSmallIntegerField(
        default=1, validators=LIMITS["pipeline_parallel_size"].validators()
    )
    min_replicas = models.PositiveSmallIntegerField(default=1, validators=LIMITS["min_replicas"].validators())
    max_replicas = models.PositiveSmallIntegerField(default=1, validators=LIMITS["max_replicas"].validators())
    target_ongoing_requests = models.PositiveIntegerField(
        default=16, validators=LIMITS["target_ongoing_requests"].validators()
    )
    max_model_len = models.PositiveIntegerField(null=True, blank=True, validators=LIMITS["max_model_len"].validators())
    gpu_memory_utilization = models.FloatField(default=0.9, validators=LIMITS["gpu_memory_utilization"].validators())
    enable_chunked_prefill = models.BooleanField(default=True)
    max_num_batched_tokens = models.PositiveIntegerField(
        null=True, blank=True, validators=LIMITS["max_num_batched_tokens"].validators()
    )
    quantization = models.CharField(max_length=10, choices=Quantization.choices, blank=True, default="")
    dtype = models.CharField(max_length=10, choices=Dtype.choices, default=Dtype.AUTO)
    kv_cache_dtype = models.CharField(
        max_length=12,
        choices=KvCacheDtype.choices,
        default=KvCacheDtype.AUTO,
        help_text="vLLM's --kv-cache-dtype: what the KV cache stores (auto: the model's dtype).",
    )
    parameter_count_b = models.FloatField(
        null=True,
        blank=True,
        validators=LIMITS["parameter_count_b"].validators(),
        help_text="Billions of parameters, for models not in the catalog.",
    )
    serving_profile = models.CharField(
        max_length=12,
        choices=ServingProfile.choices,
        blank=True,
        default="",
        help_text="The preset the engine and scaling fields were filled from (empty: custom).",
    )
    priority_tier = models.CharField(
        max_length=40,
        blank=True,
        default="",
        help_text="The priority tier's name (quotas.PriorityTier): its Kueue WorkloadPriorityClass orders "
        "admission and preemption in the tenant's queue. Empty: none (Kueue's default priority).",
    )
    # --- lifecycle ------------------------------------------------------------------------------
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING_APPROVAL, db_index=True)
    generation = models.PositiveIntegerField(default=1)
    observed_generation = models.PositiveIntegerField(default=0)
    conditions = models.JSONField(default=list, blank=True)
    status_message = models.TextField(blank=True)
    endpoint_url = models.CharField(max_length=500, blank=True)
    metrics_url = models.CharField(max_length=500, blank=True)
    cluster_uid = models.CharField(max_length=64, blank=True)
    reserved_gpus = models.PositiveIntegerField(default=0)
    # Its GPUs went to a higher priority tier of the same tenant (deployments.preemption): it holds
    # none until Kueue admits it again.
    displaced = models.BooleanField(
        default=False,
        help_text="A higher priority tier of its tenant took its GPUs: it holds none until Kueue admits it again.",
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decision_reason = models.TextField(blank=True)
    serving_revision = models.ForeignKey(
        "DeploymentRevision",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The last approved revision: what runs (empty until the first approval).",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = DeploymentQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"], condition=~Q(state="deleted"), name="unique_live_name_per_tenant"
            ),
            # The tenant endpoint routes by served model name (issue 34): one deployment per name.
            models.UniqueConstraint(
                fields=["tenant", "served_model_name"],
                condition=~Q(state="deleted"),
                name="unique_served_name_per_tenant",
            ),
            models.CheckConstraint(
                condition=Q(min_replicas__lte=models.F("max_replicas")), name="min_replicas_lte_max"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "state"])]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

    @property
    def generates(self) -> bool:
        """Whether its task produces output tokens (runtime.tasks: not embedding or score)."""
        return generates(self.task)

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def gpus_needed(self) -> int:
        """GPUs reserved for this deployment: the most it may scale to."""
        return self.max_replicas * self.gpus_per_replica

    @property
    def resource_name(self) -> str:
        """Name of the cluster object (RayService / InferenceService): `<name>-<id>`."""
        return f"{self.name}-{self.pk}"

    @property
    def proposed_revision(self) -> DeploymentRevision | None:
        """The revision waiting for a decision, if any (at most one)."""
        return self.revisions.filter(status=RevisionStatus.PROPOSED).first()

    @property
    def proposed_number(self) -> int | None:
        """The number of the revision waiting for a decision (what approve and reject name)."""
        return self.revisions.filter(status=RevisionStatus.PROPOSED).values_list("number", flat=True).first()

    def condition(self, type_: str) -> dict | None:
        return next((c for c in self.conditions if c.get("type") == type_), None)


class DeploymentRevision(models.Model):
    """One immutable spec of a deployment: proposed, then approved (it serves, or served),
    rejected, withdrawn or superseded by a newer proposal. At most one is proposed at a time.

    `spec` holds the SPEC_FIELDS values (the flavor as its primary key); `gpus` the GPUs it
    reserves (max replicas × TP × PP). The decision is bound to the revision: approving a
    revision that is no longer the proposed one is a conflict, never a different change.
    """

    deployment = models.ForeignKey(ModelDeployment, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    spec = models.JSONField()
    gpus = models.PositiveIntegerField()
    status = models.CharField(max_length=12, choices=RevisionStatus.choices, default=RevisionStatus.PROPOSED)
    message = models.TextField(blank=True, help_text="What the change is, as the proposer or the portal said it.")
    rollback_of = models.PositiveIntegerField(null=True, blank=True, help_text="The revision this one restores.")
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    proposed_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_by_policy = models.BooleanField(default=False)
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "number"], name="one_revision_number_per_deployment"),
            models.UniqueConstraint(
                fields=["deployment"], condition=Q(status="proposed"), name="at_most_one_proposed_revision"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id} r{self.number}"

    @property
    def decider(self) -> str:
        """Who decided, as the pages and the API say it ("policy", a user name, or "")."""
        if self.decided_by_policy:
            return "policy"
        return self.decided_by.username if self.decided_by_id and self.decided_by else ""


class DeploymentEvent(models.Model):
    """One entry in a deployment's timeline: a transition or something the cluster reported."""

    deployment = models.ForeignKey(ModelDeployment, on_delete=models.CASCADE, related_name="events")
    created = models.DateTimeField(auto_now_add=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    type = models.CharField(max_length=10, choices=EventType.choices, default=EventType.NORMAL)
    from_state = models.CharField(max_length=20, choices=State.choices, blank=True)
    to_state = models.CharField(max_length=20, choices=State.choices, blank=True)
    reason = models.CharField(max_length=64)  # CamelCase, like Kubernetes event reasons
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["deployment", "-created"])]

    def __str__(self) -> str:
        return f"{self.reason} ({self.deployment_id})"


class DeploymentPhase(models.Model):
    """When one startup phase of a deployment's latest start began (runtime.phases.PHASES).

    One row per phase and deployment: a new approval starts a new row set. Recorded by the
    reconciler while the deployment is unsettled, from the Workload, pods, Events and engine log.
    """

    deployment = models.ForeignKey(ModelDeployment, on_delete=models.CASCADE, related_name="phases")
    name = models.CharField(max_length=32)
    at = models.DateTimeField()

    class Meta:
        ordering = ["at", "id"]
        constraints = [models.UniqueConstraint(fields=["deployment", "name"], name="one_phase_row_per_deployment")]

    def __str__(self) -> str:
        return f"{self.name} ({self.deployment_id})"
