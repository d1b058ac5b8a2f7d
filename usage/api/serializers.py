"""Query parameters and answers of the usage API (also validates the pages' parameters)."""

from __future__ import annotations

from rest_framework import serializers

from usage.reports import DEFAULT_SORT, PAGE_SIZE, SORT_CHOICES, parse_month


class UsageQuerySerializer(serializers.Serializer):
    """?month=YYYY-MM&tenant=<slug>&sort=<key or -key>&limit=&offset="""

    month = serializers.CharField(required=False, allow_blank=True, max_length=7, help_text="YYYY-MM (default: now)")
    tenant = serializers.SlugField(required=False, allow_blank=True, max_length=40, help_text="one tenant's slug")
    sort = serializers.ChoiceField(choices=SORT_CHOICES, required=False, default=DEFAULT_SORT)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=500, default=PAGE_SIZE)
    offset = serializers.IntegerField(required=False, min_value=0, max_value=10**6, default=0)
    rows = serializers.ChoiceField(
        choices=["deployments", "keys", "shared"],
        required=False,
        default="deployments",
        help_text="CSV only: the deployment rows, the per-key rows or the shared-model chargeback rows.",
    )

    def validate_month(self, value: str):
        try:
            return parse_month(value)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None


class BudgetSerializer(serializers.Serializer):
    monthly_budget = serializers.DecimalField(max_digits=12, decimal_places=2, allow_null=True)
    spent = serializers.DecimalField(max_digits=18, decimal_places=2, help_text="Known cost this month.")
    pct = serializers.FloatField(allow_null=True)
    level = serializers.IntegerField(help_text="0, 80 or 100: the warning level reached.")
    hard_stop = serializers.BooleanField()
    stopped_at = serializers.DateTimeField(allow_null=True)
    banner = serializers.CharField(help_text="The warning shown on the tenant's pages (empty below 80 %).")


class _Figures(serializers.Serializer):
    reserved_gpu_hours = serializers.DecimalField(
        max_digits=18, decimal_places=6, help_text="GPU-hours while quota was held (charged)."
    )
    serving_gpu_hours = serializers.DecimalField(
        max_digits=18, decimal_places=6, help_text="The reserved GPU-hours while Ready or Degraded."
    )
    utilisation_pct = serializers.FloatField(allow_null=True, help_text="serving / reserved × 100")
    prompt_tokens = serializers.IntegerField()
    generation_tokens = serializers.IntegerField()
    cost = serializers.DecimalField(
        max_digits=18, decimal_places=2, allow_null=True, help_text="Null: some hours are on an unpriced flavor."
    )
    cost_per_mtok = serializers.DecimalField(
        max_digits=24, decimal_places=4, allow_null=True, help_text="$ per 1M generated (output) tokens."
    )
    unpriced_gpu_hours = serializers.DecimalField(max_digits=18, decimal_places=6)
    updated = serializers.DateTimeField(allow_null=True, help_text="When the ledger was last computed.")


class TenantUsageSerializer(_Figures):
    tenant = serializers.CharField()
    display_name = serializers.CharField()
    deployments = serializers.IntegerField()
    budget = BudgetSerializer()
    shared_owes = serializers.DecimalField(
        max_digits=18, decimal_places=2, help_text="Its share of other tenants' shared deployments it used."
    )
    shared_owed = serializers.DecimalField(
        max_digits=18, decimal_places=2, help_text="Other tenants' shares of its shared deployments."
    )
    net_cost = serializers.DecimalField(
        max_digits=18, decimal_places=2, allow_null=True, help_text="cost - shared_owed + shared_owes."
    )


class DeploymentUsageSerializer(_Figures):
    deployment_id = serializers.IntegerField()
    deployment = serializers.CharField()
    state = serializers.CharField()
    flavor = serializers.CharField()
    task = serializers.CharField(help_text="chat, completion, embedding or score.")
    tenant = serializers.CharField()
    generation_tokens = serializers.IntegerField(
        allow_null=True, help_text="Null for an embedding or score deployment: it generates no tokens."
    )
    tokens = serializers.IntegerField(help_text="The tokens counted: output tokens, or input tokens (tokens_counted).")
    tokens_counted = serializers.ChoiceField(
        choices=["output", "input"], help_text="input for an embedding or score deployment, output otherwise."
    )
    cost_per_mtok = serializers.DecimalField(
        max_digits=24, decimal_places=4, allow_null=True, help_text="$ per 1M tokens of the kind tokens_counted says."
    )
    note = serializers.CharField(help_text="Why it cost what it did, when it never served or has no price.")


class KeyUsageSerializer(serializers.Serializer):
    key_id = serializers.IntegerField(allow_null=True, help_text="Null: the portal's own Try-it key.")
    key = serializers.CharField(help_text="The key's name.")
    prefix = serializers.CharField(help_text="The key's first characters.")
    tenant = serializers.CharField(help_text="The key's tenant (for Try-it: the deployment's).")
    owner = serializers.CharField(help_text="The deployment's tenant (another one for a shared model).")
    deployment_id = serializers.IntegerField()
    deployment = serializers.CharField()
    requests = serializers.IntegerField()
    failed = serializers.IntegerField(help_text="Requests answered with a status of 400 or more.")
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    unsplit_tokens = serializers.IntegerField(
        help_text="Tokens the cluster Gateway counted without an input/output split."
    )


class ChargeSerializer(serializers.Serializer):
    deployment_id = serializers.IntegerField()
    deployment = serializers.CharField()
    owner = serializers.CharField(help_text="The shared deployment's tenant.")
    consumer = serializers.CharField(help_text="The tenant that used it.")
    tokens = serializers.IntegerField(help_text="The consumer's tokens in and out.")
    share_tokens = serializers.IntegerField(help_text="Every tenant's tokens on the priced days.")
    cost = serializers.DecimalField(max_digits=18, decimal_places=2, help_text="What the consumer owes the owner.")


class UsageReportSerializer(serializers.Serializer):
    month = serializers.CharField()
    sort = serializers.CharField()
    tenants = TenantUsageSerializer(many=True)
    count = serializers.IntegerField(help_text="Deployments with usage in the month.")
    limit = serializers.IntegerField()
    offset = serializers.IntegerField()
    results = DeploymentUsageSerializer(many=True)
    keys = KeyUsageSerializer(
        many=True,
        help_text="Use per API key and deployment, most tokens first, as the local gateway reports it or the "
        "cluster Gateway's counters count it (total tokens only: `unsplit_tokens`).",
    )
    shared = ChargeSerializer(
        many=True,
        help_text="Shared deployments' cost split by tokens, day by day; the owner keeps the rest (usage.chargeback).",
    )


class TenantBudgetSerializer(BudgetSerializer):
    tenant = serializers.CharField()
    month = serializers.CharField()
