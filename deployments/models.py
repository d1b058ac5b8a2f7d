"""Model deployments and their lifecycle events."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from deployments.choices import Backend, Dtype, EventType, Quantization, ServingProfile, State
from deployments.limits import LIMITS
from quotas.models import GpuFlavor, Tenant, TenantOwnedQuerySet
from quotas.validators import validate_dns1123_label

# The fields a request sets and a spec update may change (services, serializers and the API list).
SPEC_FIELDS = (
    "model_source",
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
    "parameter_count_b",
    "serving_profile",  # a label (deployments.profiles): changes nothing that runs
)


class DeploymentQuerySet(TenantOwnedQuerySet):
    def live(self):
        return self.exclude(state=State.DELETED)


class ModelDeployment(models.Model):
    """One LLM endpoint a tenant asked for: the spec, the lifecycle state and what was observed.

    `generation` counts spec changes; `observed_generation` is the generation the runtime last
    converged. The badge shown in the UI is derived from `state` and `conditions`.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="deployments")
    name = models.CharField(max_length=40, validators=[validate_dns1123_label])
    # --- spec -----------------------------------------------------------------------------------
    model_source = models.CharField(max_length=500)
    served_model_name = models.CharField(max_length=200)
    hf_token_secret = models.CharField(max_length=253, blank=True)
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="deployments")
    backend = models.CharField(max_length=20, choices=Backend.choices, default=Backend.KUBERAY)
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
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decision_reason = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = DeploymentQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"], condition=~Q(state="deleted"), name="unique_live_name_per_tenant"
            ),
            models.CheckConstraint(
                condition=Q(min_replicas__lte=models.F("max_replicas")), name="min_replicas_lte_max"
            ),
        ]
        indexes = [models.Index(fields=["tenant", "state"])]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

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

    def condition(self, type_: str) -> dict | None:
        return next((c for c in self.conditions if c.get("type") == type_), None)


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
