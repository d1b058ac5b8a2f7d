from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api_fields import NamedRef
from quotas.ceiling import quota_ceiling
from quotas.flavors import FIELDS as FLAVOR_FIELDS
from quotas.models import GpuFlavor, PriorityTier, QuotaChangeRequest, Tenant, TenantQuota, is_platform_admin
from quotas.nodepools import pool_summary


class GpuFlavorSerializer(serializers.ModelSerializer):
    reason = serializers.CharField(
        max_length=2000, required=False, allow_blank=True, write_only=True, help_text="Why: kept in the audit log."
    )

    node_pool = serializers.SerializerMethodField(
        help_text="The Karpenter NodePool the portal keeps for the flavor (null: not provisioned)."
    )

    class Meta:
        model = GpuFlavor
        # The fields the audited service writes, the pool, and why the Kueue sync cannot update it.
        fields = [*FLAVOR_FIELDS, "reason", "node_pool", "kueue_problem"]
        extra_kwargs = {
            "provisioning": {"help_text": "Karpenter NodePool settings (quotas.provisioning); {}: not provisioned."},
            "topology_levels": {"help_text": "Node label keys, widest first, kubernetes.io/hostname last."},
        }

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_node_pool(self, flavor: GpuFlavor) -> dict | None:
        pool = pool_summary(flavor)
        request = self.context.get("request")
        if pool and not (request and is_platform_admin(request.user)):
            pool.pop("manifest")  # names the node role and subnet tags: platform admins only
        return pool

    def validate(self, attrs):
        fields = [f for f in self.Meta.fields if f not in ("reason", "node_pool", "kueue_problem")]
        values = {k: v for k, v in attrs.items() if k != "reason"}
        instance = GpuFlavor(**{**({f: getattr(self.instance, f) for f in fields} if self.instance else {}), **values})
        instance.clean()  # node labels and tolerations end up in Kueue objects
        return attrs


class PriorityTierSerializer(serializers.ModelSerializer):
    """A priority tier; writes go through quotas.tiers (audited, mirrored to Kueue)."""

    class_name = serializers.CharField(
        read_only=True, help_text="The Kueue WorkloadPriorityClass the portal keeps for the tier: llm-portal-<name>."
    )
    deployments = serializers.SerializerMethodField(
        help_text="Deployments (not deleted) that use the tier, in the tenants you see. A tier in use cannot be "
        "deleted."
    )
    reason = serializers.CharField(
        max_length=2000, required=False, allow_blank=True, write_only=True, help_text="Why: kept in the audit log."
    )

    class Meta:
        model = PriorityTier
        fields = ["name", "display_name", "value", "description", "class_name", "deployments", "created", "reason"]
        read_only_fields = ["created"]
        extra_kwargs = {
            "display_name": {"help_text": "What people read, e.g. Production."},
            "description": {"help_text": "When to choose it; copied to the WorkloadPriorityClass."},
        }

    def get_deployments(self, tier: PriorityTier) -> int:
        return self.context.get("tier_usage", {}).get(tier.name, 0)


class TenantQuotaSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    free_nominal_gpus = serializers.SerializerMethodField()

    class Meta:
        model = TenantQuota
        fields = [
            "id",
            "tenant",
            "flavor",
            "nominal_gpus",
            "borrowing_limit_gpus",
            "lending_limit_gpus",
            "reserved_gpus",
            "free_nominal_gpus",
            "updated",
        ]
        read_only_fields = ["reserved_gpus", "updated"]

    def get_free_nominal_gpus(self, obj) -> int:
        # What new reservations may take within nominal: the one ceiling rule (quotas.ceiling), so an
        # ended temporary raise or an archived tenant shows none free even before the revert runs.
        return max(0, quota_ceiling(obj).nominal - obj.reserved_gpus)


class QuotaSetSerializer(serializers.Serializer):
    """New quota values: a value left out keeps the quota's current one (quotas.services.quota_set)."""

    nominal_gpus = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False, help_text="Left out: unchanged (required for a new quota)."
    )
    borrowing_limit_gpus = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False, help_text="Left out: unchanged (0 for a new quota)."
    )
    lending_limit_gpus = serializers.IntegerField(
        min_value=0,
        max_value=100_000,
        allow_null=True,
        required=False,
        help_text="null: all unused quota may be lent. Left out: unchanged (null for a new quota).",
    )
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class QuotaCreateSerializer(QuotaSetSerializer):
    tenant = NamedRef("tenant", slug_field="slug", queryset=Tenant.objects.all())
    flavor = NamedRef("flavor", slug_field="name", queryset=GpuFlavor.objects.filter(active=True))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            # Unknown and foreign tenants look the same: "does not exist".
            self.fields["tenant"].queryset = Tenant.objects.visible_to(request.user)


class QuotaChangeRequestSerializer(serializers.ModelSerializer):
    tenant = NamedRef("tenant", slug_field="slug", queryset=Tenant.objects.all())
    flavor = NamedRef("flavor", slug_field="name", queryset=GpuFlavor.objects.filter(active=True))
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    decided_by = serializers.CharField(source="decided_by.username", default=None, allow_null=True, read_only=True)
    justification = serializers.CharField(max_length=2000)
    ends_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Temporary change: the quota returns to the values it replaced at this time "
        "(in the future, at most a year ahead; null: permanent).",
    )

    class Meta:
        model = QuotaChangeRequest
        fields = [
            "id",
            "tenant",
            "flavor",
            "nominal_gpus",
            "borrowing_limit_gpus",
            "lending_limit_gpus",
            "justification",
            "ends_at",
            "status",
            "previous",
            "requested_by",
            "decided_by",
            "decided_at",
            "decision_comment",
            "reverted_at",
            "revert_waiting_since",
            "created",
        ]
        read_only_fields = [
            "status",
            "previous",
            "decided_at",
            "decision_comment",
            "reverted_at",
            "revert_waiting_since",
            "created",
        ]
        extra_kwargs = {
            "nominal_gpus": {"min_value": 0, "max_value": 100_000},
            "borrowing_limit_gpus": {"min_value": 0, "max_value": 100_000},
            "lending_limit_gpus": {"min_value": 0, "max_value": 100_000},
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            # Unknown and foreign tenants look the same: "does not exist".
            self.fields["tenant"].queryset = Tenant.objects.visible_to(request.user)


class DecisionSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class PreviewQuerySerializer(serializers.Serializer):
    tenant = serializers.SlugField()
    flavor = serializers.SlugField()
    gpus = serializers.IntegerField(min_value=1, max_value=100_000)


class QuotaPreviewSerializer(serializers.Serializer):
    fit = serializers.ChoiceField(choices=["nominal", "borrowing", "no_fit"])
    gpus = serializers.IntegerField()
    nominal = serializers.IntegerField()
    borrowing_limit = serializers.IntegerField()
    reserved = serializers.IntegerField()
    free_nominal = serializers.IntegerField()
    borrowable = serializers.IntegerField()
    message = serializers.CharField()
    has_quota = serializers.BooleanField(
        help_text='False: the tenant has no quota at all for this flavor (the request form marks it "no quota").'
    )
