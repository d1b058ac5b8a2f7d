"""API shapes for tenants, their request policy and their members."""

from __future__ import annotations

from rest_framework import serializers

from catalog.models import CatalogModel
from catalog.patterns import PATTERN_MAX, PATTERNS_MAX, clean_patterns
from quotas.choices import Role
from quotas.models import (
    REQUESTS_PER_MINUTE_HELP,
    TOKENS_PER_MINUTE_HELP,
    WAKE_TIMEOUT_HELP,
    GpuFlavor,
    Membership,
    Tenant,
    is_platform_admin,
)
from quotas.policy import policy_words
from quotas.tier_models import TIER_NAME_MAX, validate_tier_name
from quotas.validators import DNS1123_LABEL


def _reason():
    return serializers.CharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        default="",
        write_only=True,
        help_text="Why: kept in the audit log.",
    )


class TenantSerializer(serializers.ModelSerializer):
    namespace = serializers.CharField(read_only=True)
    local_queue = serializers.CharField(read_only=True)
    cluster_queue = serializers.CharField(read_only=True)
    cohort = serializers.CharField(source="effective_cohort", read_only=True)
    allowed_flavors = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)
    archived = serializers.BooleanField(read_only=True)
    my_role = serializers.SerializerMethodField()
    policy_words = serializers.SerializerMethodField()

    class Meta:
        model = Tenant
        fields = [
            "slug",
            "display_name",
            "namespace",
            "local_queue",
            "cluster_queue",
            "cohort",
            "auto_approve_max_gpus",
            "max_gpus_per_deployment",
            "allowed_flavors",
            "policy_words",
            "archived",
            "archived_at",
            "my_role",
        ]
        read_only_fields = fields

    def get_my_role(self, obj) -> str | None:
        user = self.context["request"].user
        return "platform_admin" if is_platform_admin(user) else obj.role_of(user)

    def get_policy_words(self, obj) -> str:
        """The request policy in words, as the platform's tenant list shows it."""
        return policy_words(obj)


class TenantWriteSerializer(serializers.Serializer):
    """Create (slug and display name required) or change (any subset) a tenant."""

    slug = serializers.RegexField(
        DNS1123_LABEL.pattern,
        max_length=40,
        help_text="Kubernetes namespace and LocalQueue name (DNS-1123 label); fixed once the tenant exists.",
    )
    display_name = serializers.CharField(max_length=100)
    cohort = serializers.RegexField(
        DNS1123_LABEL.pattern,
        max_length=63,
        required=False,
        allow_blank=True,
        help_text="Kueue cohort (empty: the platform default).",
    )
    reason = _reason()


class TierNames(serializers.ListField):
    """Priority tier names: a list of names in a request (quotas.tiers resolves them, an unknown
    one is an error on the field), the tenant's tiers by name in an answer."""

    child = serializers.CharField(max_length=TIER_NAME_MAX, validators=[validate_tier_name])

    def __init__(self, **kwargs):
        super().__init__(max_length=100, required=False, **kwargs)

    def to_representation(self, data):
        return sorted(tier.name for tier in data.all())


class PolicySerializer(serializers.Serializer):
    auto_approve_max_gpus = serializers.IntegerField(
        min_value=0,
        max_value=100_000,
        help_text="Requests within nominal quota and at most this many GPUs are approved without a person (0: never).",
    )
    max_gpus_per_deployment = serializers.IntegerField(
        min_value=0, max_value=100_000, help_text="Most GPUs one deployment may reserve (0: no limit)."
    )
    allowed_flavors = serializers.SlugRelatedField(
        slug_field="name",
        many=True,
        queryset=GpuFlavor.objects.filter(active=True),
        help_text="Flavor names the tenant may request (empty: every active flavor).",
    )
    # Optional in a PUT: a setting left out keeps its value.
    allowed_models = serializers.SlugRelatedField(
        slug_field="name",
        many=True,
        required=False,
        queryset=CatalogModel.objects.filter(active=True),
        help_text="Catalog model names the tenant may deploy, each at its pinned revision "
        "(empty, with no patterns: any model).",
    )
    allowed_source_patterns = serializers.ListField(
        child=serializers.CharField(max_length=PATTERN_MAX, trim_whitespace=True),
        max_length=PATTERNS_MAX,
        required=False,
        help_text="Model source globs the tenant may deploy, e.g. meta-llama/* or s3://team-bucket/* "
        "(* matches anything, '/' included).",
    )
    allowed_tiers = TierNames(
        help_text="Priority tier names the tenant's deployments may use (empty: none; its deployments have no tier)."
    )
    auto_approve_tiers = TierNames(
        help_text="Allowed tier names whose requests the policy may approve within its ceiling; a request with "
        "another tier waits for a platform admin."
    )
    monthly_budget = serializers.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=0,
        allow_null=True,
        required=False,
        help_text="Spend per calendar month in the currency of the GPU-hour prices (null: no budget).",
    )
    budget_hard_stop = serializers.BooleanField(
        required=False, help_text="At 100 % of the budget, stop the tenant's deployments and refuse new starts."
    )
    idle_warn_hours = serializers.IntegerField(
        min_value=0,
        max_value=24 * 90,
        required=False,
        help_text="Warn after this many hours without tokens (0: never).",
    )
    idle_stop_hours = serializers.IntegerField(
        min_value=0,
        max_value=24 * 90,
        required=False,
        help_text="Stop and release the GPUs after this many hours without tokens (0: never).",
    )
    serving_schedule = serializers.CharField(
        max_length=200,
        allow_blank=True,
        required=False,
        help_text="When deployments may run, e.g. 'mon-fri 08:00-20:00' (empty: always).",
    )
    wake_timeout_seconds = serializers.IntegerField(
        min_value=0, max_value=900, required=False, help_text=WAKE_TIMEOUT_HELP
    )
    tokens_per_minute = serializers.IntegerField(
        min_value=0, max_value=10**9, required=False, help_text=TOKENS_PER_MINUTE_HELP
    )
    requests_per_minute = serializers.IntegerField(
        min_value=0, max_value=10**7, required=False, help_text=REQUESTS_PER_MINUTE_HELP
    )
    reason = _reason()

    def validate_allowed_source_patterns(self, value: list[str]) -> list[str]:
        """The rule the policy form uses (catalog.patterns)."""
        patterns, problem = clean_patterns(value)
        if problem:
            raise serializers.ValidationError(problem)
        return patterns


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    email = serializers.CharField(source="user.email", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "email", "role", "source"]
        read_only_fields = fields


class MemberAddSerializer(serializers.Serializer):
    user = serializers.CharField(max_length=254, help_text="Username or e-mail address of an existing account.")
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)
    reason = _reason()


class MemberRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)
    reason = _reason()


class ReasonSerializer(serializers.Serializer):
    reason = _reason()


class ArchiveSerializer(serializers.Serializer):
    confirm = serializers.CharField(max_length=40, help_text="The tenant's slug, typed again.")
    reason = serializers.CharField(max_length=2000, help_text="Why: kept in the audit log.")
