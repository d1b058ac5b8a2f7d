"""The advisor applied to a stored deployment: its objectives, its recent points, its quota
headroom, and each piece of advice with links to the chart and the data behind it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, fields, replace
from datetime import datetime, timedelta

from django.urls import reverse
from django.utils import timezone

from deployments.models import ModelDeployment
from deployments.profiles import scales_to_zero
from metrics.advisor import Advice, Objectives, advise
from metrics.models import AdvisorObjectives, MetricSample, Resolution
from metrics.profile_hints import with_profile_hints
from runtime.tasks import generates

# The fields a deployment may set for itself (the rest of Objectives are the rules' constants).
OBJECTIVE_FIELDS = ("ttft_p95_objective_s", "waiting_floor", "kv_cache_floor_pct", "breach_share_pct")
assert set(OBJECTIVE_FIELDS) <= {f.name for f in fields(Objectives)}
ADVICE_WINDOW = "1h"  # the chart window the advice links to (it covers every rule's window)
# What the tenant's idle policy will do, added to the idle advice. reclaim (above this app) fills
# it in at start-up (reclaim.apps); this app never imports it.
IDLE_NOTES: dict[str, Callable[[ModelDeployment, datetime], str]] = {}


def register_idle_note(name: str, note: Callable[[ModelDeployment, datetime], str]) -> None:
    IDLE_NOTES[name] = note


def objectives_for(deployment: ModelDeployment) -> Objectives:
    """The deployment's own objectives where it set them, the defaults elsewhere."""
    row = AdvisorObjectives.objects.filter(deployment=deployment).first()
    if row is None:
        return Objectives()
    return Objectives(**{name: getattr(row, name) for name in OBJECTIVE_FIELDS})


def advice_for(
    deployment: ModelDeployment, *, objectives: Objectives | None = None, now: datetime | None = None
) -> list[Advice]:
    """The advisor over the last two hours of raw points, with this tenant's quota headroom."""
    from quotas.services import quota_preview

    now = now or timezone.now()
    objectives = objectives or objectives_for(deployment)
    horizon = max(objectives.window_s, objectives.idle_window_s) + 300
    points = list(
        MetricSample.objects.filter(
            deployment=deployment, resolution=Resolution.RAW, ts__gte=now - timedelta(seconds=horizon)
        ).order_by("ts")
    )
    if not points:
        return []
    fit = quota_preview(tenant=deployment.tenant, flavor=deployment.flavor, gpus=1)
    found = advise(
        points,
        objectives=objectives,
        quota_headroom_gpus=fit.free_nominal + fit.borrowable,
        gpus_per_replica=deployment.gpus_per_replica,
        now=now,
        generates=generates(deployment.task),
    )
    # Each piece of advice also names the serving-profile change that addresses it.
    found = with_profile_hints(
        found, current=deployment.serving_profile, scale_to_zero=scales_to_zero(deployment.backend)
    )
    return [_with_idle_notes(deployment, a, now) for a in found]


def _with_idle_notes(deployment: ModelDeployment, advice: Advice, now: datetime) -> Advice:
    notes = [text for note in IDLE_NOTES.values() if advice.code == "idle" and (text := note(deployment, now))]
    return replace(advice, message=" ".join([advice.message, *notes])) if notes else advice


def advice_links(deployment_id: int, advice: Advice) -> dict[str, str]:
    """Where to check a piece of advice: the chart on the detail page and the series it rests on."""
    chart = reverse("deployment-detail", args=[deployment_id]) + f"?window={ADVICE_WINDOW}#chart-{advice.chart}"
    data = reverse("deployment-metrics", args=[deployment_id]) + f"?window={ADVICE_WINDOW}"
    return {"chart_url": chart, "data_url": data}


def advice_dict(deployment_id: int, advice: Advice) -> dict:
    """JSON-safe advice with its links (the API's and the detail page's shape)."""
    return {**asdict(advice), **advice_links(deployment_id, advice)}
