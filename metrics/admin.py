"""Django admin for metrics: read-only (the scrape cycle writes these rows)."""

from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyAdmin, register_remaining
from metrics.models import MetricSample


@admin.register(MetricSample)
class MetricSampleAdmin(ReadOnlyAdmin):
    list_display = ["deployment", "ts", "resolution", "generation_tokens_per_s", "kv_cache_pct", "ttft_p95"]
    list_filter = ["resolution"]
    search_fields = ["deployment__name", "deployment__tenant__slug"]
    list_select_related = ["deployment__tenant"]
    date_hierarchy = "ts"


register_remaining("metrics")
