"""What the metrics app shows on other apps' pages: the deployment pages' live cells, advice and
charts (registered with deployments.panels by MetricsConfig.ready), and the overview's cells."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Avg
from django.utils import timezone

from deployments.models import ModelDeployment
from metrics.advice import advice_dict, advice_for
from metrics.charts import chart_names
from metrics.kv_report import kv_comparison
from metrics.models import MetricSample, Resolution

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


@dataclass(frozen=True)
class Busy:
    """One row of the Cluster page's "Busiest deployments": a deployment once, with its mean rate."""

    deployment: ModelDeployment
    generation_tokens_per_s: float

    @property
    def deployment_id(self) -> int:
        return self.deployment.pk


def busiest(*, minutes: int = 5, limit: int = 10) -> list[Busy]:
    """The deployments generating the most tokens over the last `minutes`, each once, by the mean
    of its raw points' rates (one grouped query, then the rows for the page)."""
    since = timezone.now() - timedelta(minutes=minutes)
    top = list(
        MetricSample.objects.filter(resolution=Resolution.RAW, ts__gte=since, generation_tokens_per_s__isnull=False)
        .order_by()
        .values("deployment_id")
        .annotate(rate=Avg("generation_tokens_per_s"))
        .order_by("-rate", "deployment_id")[:limit]
    )
    deps = ModelDeployment.objects.select_related("tenant").in_bulk([row["deployment_id"] for row in top])
    return [Busy(deps[row["deployment_id"]], row["rate"]) for row in top if row["deployment_id"] in deps]


def detail_panel(request, dep: ModelDeployment) -> dict:
    """The detail page's advice (in the status partial), chart windows and the charts its task has
    (metrics.charts.chart_names), and the KV cache vLLM reported beside the estimate (metrics.kv_report)."""
    advice = [advice_dict(dep.pk, a) for a in advice_for(dep)]
    return {"advice": advice, "ranges": RANGES, "chart_names": chart_names(dep.task), "kv_report": kv_comparison(dep)}


def list_panel(request, deployments) -> dict:
    """The list rows' live cells (templates/deployments/_live_cells.html): the newest samples."""
    return {"latest": latest_samples(deployments)}
