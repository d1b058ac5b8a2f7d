"""The usage ledger as stored rollups: one row per deployment and local day, one per deployment
and calendar month (the sum of its days), and which budget warnings went out.

Rows are written only by usage.rollup from the facts the portal records (quota reservations,
deployment events, engine token counters); reports read them and nothing else.
"""

from __future__ import annotations

from django.db import models


class UsageFigures(models.Model):
    """The figures a day or a month holds. GPU-hours and cost keep six decimals so that sums of
    days round to the same cent as the month computed at once."""

    deployment = models.ForeignKey("deployments.ModelDeployment", on_delete=models.CASCADE, related_name="+")
    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.CASCADE, related_name="+")
    # GPU-hours while quota was held (what the tenant is charged for) ...
    reserved_gpu_hours = models.DecimalField(max_digits=18, decimal_places=6, default=0)
    # ... and the part of them while the deployment was Ready or Degraded (admitted and serving).
    serving_gpu_hours = models.DecimalField(max_digits=18, decimal_places=6, default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    generation_tokens = models.BigIntegerField(default=0)
    # Reserved GPU-hours × the flavor's price; null when some of the hours are on an unpriced flavor.
    cost = models.DecimalField(max_digits=18, decimal_places=6, null=True)
    unpriced_gpu_hours = models.DecimalField(max_digits=18, decimal_places=6, default=0)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class UsageDay(UsageFigures):
    """One deployment's usage on one day (settings.TIME_ZONE)."""

    day = models.DateField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["deployment", "day"], name="usage_one_row_per_deployment_day")]
        indexes = [models.Index(fields=["day", "tenant"])]

    def __str__(self) -> str:
        return f"usage {self.deployment_id} on {self.day}"


class UsageMonth(UsageFigures):
    """One deployment's usage in one calendar month: the sum of its days, plus why it cost what
    it did when it never served (`note`)."""

    month = models.DateField(help_text="The first day of the month.")
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["deployment", "month"], name="usage_one_row_per_deployment_month")
        ]
        indexes = [models.Index(fields=["month", "tenant"])]

    def __str__(self) -> str:
        return f"usage {self.deployment_id} in {self.month:%Y-%m}"


class BudgetNotice(models.Model):
    """A budget warning that went out: one per tenant, month and level, so it is sent once."""

    tenant = models.ForeignKey("quotas.Tenant", on_delete=models.CASCADE, related_name="+")
    month = models.DateField()
    level = models.PositiveSmallIntegerField(help_text="80 or 100 (% of the monthly budget).")
    spent = models.DecimalField(max_digits=18, decimal_places=2)
    budget = models.DecimalField(max_digits=12, decimal_places=2)
    sent = models.PositiveSmallIntegerField(default=0, help_text="Messages the mail backend accepted.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "month", "level"], name="usage_one_notice_per_level_month")
        ]
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.month:%Y-%m} {self.level} %"
