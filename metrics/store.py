"""Metric samples: store derived points, read series for a window, downsample, advise.

Retention (bounded storage): raw 15 s points for 1 day, 1-minute rollups for 7 days, 10-minute
rollups for 90 days. Rollups are maintained continuously for completed buckets, so any window
is read at a single resolution chosen to keep charts ≤ ~1,500 points.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from deployments.models import ModelDeployment
from metrics.advisor import Advice, Thresholds, advise
from metrics.models import MetricSample, Resolution
from runtime.exposition.derive import SERIES_FIELDS, MetricPoint

WINDOWS = {
    "1h": (timedelta(hours=1), Resolution.RAW),
    "6h": (timedelta(hours=6), Resolution.RAW),
    "24h": (timedelta(hours=24), Resolution.MINUTE),
    "7d": (timedelta(days=7), Resolution.TEN_MINUTES),
    "30d": (timedelta(days=30), Resolution.TEN_MINUTES),
}
RETENTION = {
    Resolution.RAW: timedelta(days=1),
    Resolution.MINUTE: timedelta(days=7),
    Resolution.TEN_MINUTES: timedelta(days=90),
}
ROLLUPS = ((Resolution.MINUTE, Resolution.RAW), (Resolution.TEN_MINUTES, Resolution.MINUTE))


def new_sample(deployment_id: int, point: MetricPoint) -> MetricSample:
    """The raw sample for `point`, unsaved (the scrape cycle writes a shard's samples at once)."""
    values = {name: getattr(point, name) for name in SERIES_FIELDS}
    return MetricSample(
        deployment_id=deployment_id,
        resolution=Resolution.RAW,
        ts=datetime.fromtimestamp(point.timestamp, tz=UTC),
        **values,
    )


def series(deployment: ModelDeployment, window: str, *, now: datetime | None = None) -> dict:
    """Timestamps and one list per metric for `window` (one indexed query, values only)."""
    span, resolution = WINDOWS[window]
    now = now or timezone.now()
    rows = (
        MetricSample.objects.filter(deployment=deployment, resolution=resolution, ts__gte=now - span)
        .order_by("ts")
        .values_list("ts", *SERIES_FIELDS)
    )
    timestamps, columns = [], {name: [] for name in SERIES_FIELDS}
    for row in rows:
        timestamps.append(row[0])
        for name, value in zip(SERIES_FIELDS, row[1:], strict=True):
            columns[name].append(value)
    return {"window": window, "resolution_s": int(resolution), "timestamps": timestamps, "series": columns}


def summary(deployment: ModelDeployment) -> dict | None:
    latest = MetricSample.objects.filter(deployment=deployment, resolution=Resolution.RAW).order_by("-ts").first()
    if latest is None:
        return None
    return {"ts": latest.ts.isoformat(), **{name: getattr(latest, name) for name in SERIES_FIELDS}}


def _bucket(ts: datetime, seconds: int) -> datetime:
    epoch = int(ts.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


def _mean(values: list) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _rollup(target: int, source: int, now: datetime) -> int:
    """Average `source` rows into `target` buckets that are complete and not yet rolled up."""
    made = 0
    last_complete = _bucket(now, target)
    # order_by() drops Meta.ordering ("ts"), which would otherwise make DISTINCT run per row.
    for dep_id in (
        MetricSample.objects.filter(resolution=source).order_by().values_list("deployment_id", flat=True).distinct()
    ):
        last = (
            MetricSample.objects.filter(deployment_id=dep_id, resolution=target)
            .order_by("-ts")
            .values_list("ts", flat=True)
            .first()
        )
        start = last + timedelta(seconds=target) if last else None
        rows = MetricSample.objects.filter(deployment_id=dep_id, resolution=source, ts__lt=last_complete)
        if start is not None:
            rows = rows.filter(ts__gte=start)
        buckets: dict[datetime, list] = defaultdict(list)
        for row in rows.values_list("ts", *SERIES_FIELDS).iterator(chunk_size=2000):
            buckets[_bucket(row[0], target)].append(row[1:])
        MetricSample.objects.bulk_create(
            [
                MetricSample(
                    deployment_id=dep_id,
                    resolution=target,
                    ts=ts,
                    **{name: _mean([r[i] for r in group]) for i, name in enumerate(SERIES_FIELDS)},
                )
                for ts, group in sorted(buckets.items())
            ]
        )
        made += len(buckets)
    return made


@transaction.atomic
def downsample(*, now: datetime | None = None) -> dict:
    """Roll raw points up to 1 min and 10 min, then drop what is past retention."""
    now = now or timezone.now()
    made = {int(target): _rollup(target, source, now) for target, source in ROLLUPS}
    deleted = {
        int(res): MetricSample.objects.filter(resolution=res, ts__lt=now - keep).delete()[0]
        for res, keep in RETENTION.items()
    }
    return {"rolled_up": made, "deleted": deleted}


def advice_for(
    deployment: ModelDeployment, *, thresholds: Thresholds | None = None, now: datetime | None = None
) -> list[Advice]:
    """The advisor over the last two hours of raw points, with this tenant's quota headroom."""
    from quotas.services import quota_preview

    now = now or timezone.now()
    points = list(
        MetricSample.objects.filter(
            deployment=deployment, resolution=Resolution.RAW, ts__gte=now - timedelta(hours=2, minutes=5)
        ).order_by("ts")
    )
    if not points:
        return []
    fit = quota_preview(tenant=deployment.tenant, flavor=deployment.flavor, gpus=1)
    return advise(
        points,
        thresholds=thresholds,
        quota_headroom_gpus=fit.free_nominal + fit.borrowable,
        gpus_per_replica=deployment.gpus_per_replica,
        now=now,
    )
