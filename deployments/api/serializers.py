from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog.choices import Task
from catalog.drafts import with_catalog_model
from catalog.models import CatalogModel
from core.api_fields import NamedRef
from deployments.api.revision_serializers import NUMBER_MAX, ProposedRevisionSerializer, proposal
from deployments.choices import Dtype, KvCacheDtype, Quantization, ServingProfile, backend_choices
from deployments.limits import LIMITS
from deployments.models import SPEC_FIELDS, DeploymentEvent, ModelDeployment
from deployments.queries import derived_badge
from quotas.models import GpuFlavor, Tenant

ASCII_TEXT = r"^[\x20-\x7e]*$"


class StrictFloatField(serializers.FloatField):
    """A float that is a number in the JSON: DRF's FloatField reads `true` as 1.0."""

    def to_internal_value(self, data):
        if isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class BackendField(serializers.ChoiceField):
    """A registered backend (runtime.backends, the one list). DRF copies declared fields into each
    serializer instance by calling __init__ again, so the choices are read per request."""

    def __init__(self, **kwargs):
        super().__init__(choices=backend_choices(), **kwargs)


class DeploymentSpecSerializer(serializers.Serializer):
    """The fields of a deployment request. Type coercion and ranges here; the rules that need
    the flavor or the quota live in deployments.validation (shared with the browser form)."""

    model_source = serializers.CharField(
        max_length=500, required=False, help_text="Required unless `catalog_model` names the model."
    )
    model_revision = serializers.CharField(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="Hugging Face revision to load (commit id, tag or branch; empty: the default branch). Filled "
        "from `catalog_model`; a new `model_source` without one loads the default branch.",
    )
    catalog_model = serializers.SlugRelatedField(
        slug_field="name",
        queryset=CatalogModel.objects.filter(active=True),
        required=False,
        write_only=True,
        help_text="A catalog model's name (GET /api/v1/catalog/models/): its source, pinned revision and token "
        "Secret fill the request.",
    )
    task = serializers.ChoiceField(
        choices=Task.choices,
        required=False,
        help_text="What the model serves: chat (/v1/chat/completions), completion (/v1/completions), embedding "
        "(/v1/embeddings) or score (/v1/score). Filled from `catalog_model`; otherwise chat on a new request.",
    )
    served_model_name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    hf_token_secret = serializers.CharField(max_length=253, required=False, allow_blank=True, default="")
    flavor = NamedRef("flavor", slug_field="name", queryset=GpuFlavor.objects.all())
    backend = BackendField(required=False)
    tensor_parallel_size = serializers.IntegerField(**LIMITS["tensor_parallel_size"].bounds(), default=1)
    pipeline_parallel_size = serializers.IntegerField(**LIMITS["pipeline_parallel_size"].bounds(), default=1)
    min_replicas = serializers.IntegerField(**LIMITS["min_replicas"].bounds(), default=1)
    max_replicas = serializers.IntegerField(**LIMITS["max_replicas"].bounds(), default=1)
    target_ongoing_requests = serializers.IntegerField(**LIMITS["target_ongoing_requests"].bounds(), default=16)
    max_model_len = serializers.IntegerField(**LIMITS["max_model_len"].bounds(), required=False, allow_null=True)
    gpu_memory_utilization = StrictFloatField(**LIMITS["gpu_memory_utilization"].bounds(), default=0.9)
    enable_chunked_prefill = serializers.BooleanField(default=True)
    max_num_batched_tokens = serializers.IntegerField(
        **LIMITS["max_num_batched_tokens"].bounds(), required=False, allow_null=True
    )
    quantization = serializers.ChoiceField(choices=Quantization.choices, required=False, allow_blank=True, default="")
    dtype = serializers.ChoiceField(choices=Dtype.choices, default=Dtype.AUTO)
    kv_cache_dtype = serializers.ChoiceField(
        choices=KvCacheDtype.choices,
        default=KvCacheDtype.AUTO,
        help_text="vLLM's --kv-cache-dtype: what the KV cache stores. auto = the model's dtype; quantizing the "
        "weights does not change it.",
    )
    parameter_count_b = StrictFloatField(**LIMITS["parameter_count_b"].bounds(), required=False, allow_null=True)
    priority_tier = serializers.CharField(
        max_length=40,
        required=False,
        allow_blank=True,
        help_text="A priority tier's name (GET /api/v1/priority-tiers/); its Kueue WorkloadPriorityClass orders "
        "admission and preemption in the tenant's queue. Empty: none. The tenant's policy says which it may use; "
        "changing it needs approval unless the policy auto-approves that tier.",
    )
    serving_profile = serializers.ChoiceField(
        choices=ServingProfile.choices,
        required=False,
        allow_blank=True,
        help_text="A preset for the engine and scaling fields (GET /api/v1/serving-profiles/ shows its values and "
        "reasons). The fields you leave out are filled from it; the fields you send win. Empty: custom.",
    )

    def validate(self, data):
        """A named catalog model fills the source, revision and token (catalog.drafts)."""
        try:
            return with_catalog_model(dict(data), partial=self.partial)
        except ValueError as error:
            field, message = error.args
            raise serializers.ValidationError({field: [message]}) from None


class DeploymentCreateSerializer(DeploymentSpecSerializer):
    tenant = NamedRef("tenant", slug_field="slug", queryset=Tenant.objects.none())
    name = serializers.CharField(max_length=40)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            self.fields["tenant"].queryset = Tenant.objects.visible_to(request.user)


class DeploymentUpdateSerializer(DeploymentSpecSerializer):
    """Partial spec update: every field optional, no defaults filled in."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, partial=True, **kwargs)
        for field in self.fields.values():
            field.required = False
            field.default = serializers.empty


class DeploymentEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", default=None, allow_null=True, read_only=True)

    class Meta:
        model = DeploymentEvent
        fields = ["id", "created", "type", "reason", "message", "from_state", "to_state", "actor"]


class AnnotatedOrRelated(serializers.CharField):
    """A related object's name, read from the list queryset's annotation when it is there (no
    joined rows turned into model instances), else through the relation (detail responses)."""

    def __init__(self, annotation: str, **kwargs):
        self.annotation = annotation
        super().__init__(read_only=True, **kwargs)

    def get_attribute(self, instance):
        if self.annotation in instance.__dict__:
            return instance.__dict__[self.annotation]
        return super().get_attribute(instance)


class AnnotatedNumber(serializers.IntegerField):
    """A revision number, read from the queryset's annotation when it is there (the list: one
    statement for the page), else through the relation or property named by `source`."""

    def __init__(self, annotation: str, **kwargs):
        self.annotation = annotation
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def get_attribute(self, instance):
        if self.annotation in instance.__dict__:
            return instance.__dict__[self.annotation]
        return super().get_attribute(instance)


class DeploymentSerializer(serializers.ModelSerializer):
    tenant = AnnotatedOrRelated("tenant_slug", source="tenant.slug", help_text=Tenant._meta.get_field("slug").help_text)
    flavor = AnnotatedOrRelated("flavor_name", source="flavor.name")
    created_by = AnnotatedOrRelated("created_by_username", source="created_by.username", default=None, allow_null=True)
    gpus_per_replica = serializers.IntegerField(read_only=True)
    gpus_needed = serializers.IntegerField(read_only=True)
    resource_name = serializers.CharField(read_only=True)
    badge = serializers.SerializerMethodField()
    serving_revision = AnnotatedNumber(
        "serving_number",
        source="serving_revision.number",
        help_text="The number of the revision that runs (the last approved); null until the first approval.",
    )
    pending_revision = AnnotatedNumber(
        "pending_number",
        source="proposed_number",
        help_text="The number of the revision waiting for a decision, if any: what approve, reject and "
        "withdraw name. Its diff and cost are in `proposed_revision` on the deployment itself.",
    )

    class Meta:
        model = ModelDeployment
        fields = [
            "id",
            "tenant",
            "name",
            "resource_name",
            *SPEC_FIELDS,
            "gpus_per_replica",
            "gpus_needed",
            "state",
            "badge",
            "generation",
            "observed_generation",
            "conditions",
            "status_message",
            "endpoint_url",
            "reserved_gpus",
            "displaced",
            "serving_revision",
            "pending_revision",
            "created_by",
            "decision_reason",
            "created",
            "updated",
        ]
        read_only_fields = fields

    def get_badge(self, obj) -> str:
        return derived_badge(obj)


class DeploymentDetailSerializer(DeploymentSerializer):
    """One deployment, with the change waiting for a decision (the list leaves it out: its diff,
    cost and impact take a few queries per deployment)."""

    proposed_revision = serializers.SerializerMethodField()

    class Meta(DeploymentSerializer.Meta):
        fields = [*DeploymentSerializer.Meta.fields, "proposed_revision"]
        read_only_fields = fields

    @extend_schema_field(ProposedRevisionSerializer(allow_null=True))
    def get_proposed_revision(self, obj) -> dict | None:
        data = proposal(obj)
        return None if data is None else ProposedRevisionSerializer(data).data


# Plain attributes copied as they are (ints, strings, booleans, JSON lists).
_PLAIN = (
    "id",
    "name",
    "model_source",
    "model_revision",
    "served_model_name",
    "hf_token_secret",
    "backend",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "min_replicas",
    "max_replicas",
    "target_ongoing_requests",
    "max_model_len",
    "enable_chunked_prefill",
    "max_num_batched_tokens",
    "quantization",
    "dtype",
    "kv_cache_dtype",
    "task",
    "serving_profile",
    "priority_tier",
    "state",
    "generation",
    "observed_generation",
    "conditions",
    "status_message",
    "endpoint_url",
    "reserved_gpus",
    "displaced",
    "decision_reason",
)


def _iso(value):
    """DRF's DateTimeField output (ISO 8601, UTC as 'Z')."""
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


# The page's columns, fetched with values(): building 100 model instances per page (Model.__init__
# over ~40 fields each) was the largest cost left in a list request (bench/b1_api_list.py).
LIST_COLUMNS = (
    *_PLAIN,
    "tenant_slug",
    "flavor_name",
    "created_by_username",
    "serving_number",
    "pending_number",
    "gpu_memory_utilization",
    "parameter_count_b",
    "created",
    "updated",
)


class _ListRow:
    """One values() row with the model's own derived properties, so their logic stays in one place."""

    gpus_per_replica = ModelDeployment.gpus_per_replica
    gpus_needed = ModelDeployment.gpus_needed
    resource_name = ModelDeployment.resource_name
    condition = ModelDeployment.condition

    def __init__(self, values: dict) -> None:
        self.__dict__ = values

    @property
    def pk(self) -> int:
        return self.id


def list_rows(values_rows) -> list[dict]:
    """What DeploymentSerializer(many=True) returns for a page of the annotated list queryset
    fetched as `.values(*LIST_COLUMNS)`, built directly: DRF's per-field machinery and model
    instances were most of a page's cost (bench/b1_api_list.py). tests/deployments/test_api.py
    asserts the two agree field by field."""
    rows = []
    for values in values_rows:
        d = _ListRow(values)
        row = {name: values[name] for name in _PLAIN}
        row.update(
            tenant=d.tenant_slug,
            flavor=d.flavor_name,
            created_by=d.created_by_username,
            serving_revision=d.serving_number,
            pending_revision=d.pending_number,
            resource_name=d.resource_name,
            gpus_per_replica=d.gpus_per_replica,
            gpus_needed=d.gpus_needed,
            gpu_memory_utilization=float(d.gpu_memory_utilization),
            parameter_count_b=None if d.parameter_count_b is None else float(d.parameter_count_b),
            badge=derived_badge(d),
            created=_iso(d.created),
            updated=_iso(d.updated),
        )
        rows.append({name: row[name] for name in DeploymentSerializer.Meta.fields})
    return rows


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class RejectReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, help_text="Why: the requester sees it.")


def _revision_field(verb: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=1,
        max_value=NUMBER_MAX,
        help_text=f"The number of the revision you reviewed (the deployment's `pending_revision`). The {verb} "
        "applies to that revision only: if it is no longer the one waiting (a newer change replaced it, or "
        "someone decided first), the answer is 409 with code `stale_revision` and nothing changes. An unknown "
        "number is a 400 on this field.",
    )


class ApproveSerializer(ReasonSerializer):
    revision = _revision_field("approval")


class RejectSerializer(RejectReasonSerializer):
    revision = _revision_field("rejection")


class WithdrawSerializer(serializers.Serializer):
    revision = _revision_field("withdrawal")


class ScaleSerializer(serializers.Serializer):
    min_replicas = serializers.IntegerField(**LIMITS["min_replicas"].bounds())
    max_replicas = serializers.IntegerField(**LIMITS["max_replicas"].bounds())

    def validate(self, attrs):
        if attrs["min_replicas"] > attrs["max_replicas"]:
            raise serializers.ValidationError({"min_replicas": "Cannot exceed max_replicas."})
        return attrs


class PreviewSerializer(DeploymentSpecSerializer):
    tenant = NamedRef("tenant", slug_field="slug", queryset=Tenant.objects.none())
    name = serializers.CharField(max_length=200, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            self.fields["tenant"].queryset = Tenant.objects.visible_to(request.user)


class TrySerializer(serializers.Serializer):
    """One prompt sent through the portal to the deployment's OpenAI endpoint (the detail page's
    Try-it box; deployments.forms.TryForm has the same bounds)."""

    prompt = serializers.CharField(max_length=2000)
    max_tokens = serializers.IntegerField(
        min_value=1, max_value=512, default=32, help_text="Chat and completion deployments only."
    )
    documents = serializers.CharField(
        max_length=4000,
        required=False,
        allow_blank=True,
        default="",
        help_text="Score deployments: the texts scored against the prompt, one per line (the first 8).",
    )


class TryResultSerializer(serializers.Serializer):
    text = serializers.CharField(
        help_text="The completion; an embedding's size and first values; the scores, best first."
    )
    tokens = serializers.IntegerField(
        allow_null=True, help_text="Completion tokens (chat, completion); prompt tokens (embedding, score)."
    )
    latency_ms = serializers.IntegerField()
    dimensions = serializers.IntegerField(required=False, help_text="Embedding deployments: the vector's length.")
    scores = serializers.ListField(
        child=serializers.FloatField(), required=False, help_text="Score deployments: one per document, in order."
    )


class ManifestSerializer(serializers.Serializer):
    """What the runtime applies: the Kubernetes object (cluster backends) or the local engine's
    command line / Serve config; `error` says why it cannot be rendered, with `object` null."""

    title = serializers.CharField()
    object = serializers.JSONField(allow_null=True)
    error = serializers.CharField(allow_null=True)
