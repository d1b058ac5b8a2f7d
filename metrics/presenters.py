"""What the metrics app shows on other apps' pages: the deployment pages' live cells, advice and
charts (registered with deployments.panels by MetricsConfig.ready), and the overview's cells."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.utils import timezone

from deployments.models import ModelDeployment
from metrics.charts import CHARTS
from metrics.models import MetricSample, Resolution
from metrics.store import advice_for

RANGES = ["1h", "6h", "24h", "7d"]  # the detail page's chart windows (a subset of store.WINDOWS)


def latest_samples(deployments: Iterable[ModelDeployment]) -> dict[int, MetricSample]:
    """The newest raw sample per deployment from the last 5 minutes (one query)."""
    ids = [d.pk for d in deployments]
    since = timezone.now() - timedelta(minutes=5)
    latest: dict[int, MetricSample] = {}
    for sample in MetricSample.objects.filter(deployment_id__in=ids, resolution=Resolution.RAW, ts__gte=since).order_by(
        "ts"
    ):
        latest[sample.deployment_id] = sample
    return latest


def detail_panel(request, dep: ModelDeployment) -> dict:
    """The detail page's advice (in the status partial), chart windows and chart names."""
    return {"advice": advice_for(dep), "ranges": RANGES, "chart_names": list(CHARTS)}


def list_panel(request, deployments) -> dict:
    """The list rows' live cells (templates/deployments/_live_cells.html): the newest samples."""
    return {"latest": latest_samples(deployments)}
