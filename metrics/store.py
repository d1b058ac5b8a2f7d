"""Metric samples: store derived points, read series for a window, downsample, advise.

Retention (bounded storage): raw 15 s points for 1 day, 1-minute rollups for 7 days, 10-minute
rollups for 90 days. Rollups are made for completed buckets by the downsample task; a window is
read at one resolution chosen to keep charts ≤ ~1,500 points, from its rollups and, after the
last of them, from finer rows combined on the fly (window_rows). How points combine and how
ratios are divided: metrics.aggregate.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from deployments.models import ModelDeployment
from metrics.aggregate import COLUMNS, INCREMENTS, PEAKS, combine, window_ratios, with_ratios
from metrics.models import MetricSample, Resolution
from runtime.exposition.derive import MetricPoint

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
    values = {name: getattr(point, name) for name in COLUMNS if name not in PEAKS}  # peaks: rollups only
    return MetricSample(
        deployment_id=deployment_id,
        resolution=Resolution.RAW,
        ts=datetime.fromtimestamp(point.timestamp, tz=UTC),
        **values,
    )


def _rows(deployment_id: int, resolution: int, since: datetime, until: datetime | None = None) -> list[tuple]:
    rows = MetricSample.objects.filter(deployment_id=deployment_id, resolution=resolution, ts__gte=since)
    if until is not None:
        rows = rows.filter(ts__lt=until)
    return list(rows.order_by("ts").values_list("ts", *COLUMNS))


def window_rows(deployment_id: int, window: str, *, now: datetime) -> list[tuple]:
    """The window's points at its resolution: its rollups where they exist, then the finer rows
    after the last rollup (not rolled up yet: the newest, still open bucket, or a downsample that
    has not run) bucketed on the fly by the same rules (metrics.aggregate.combine). So every
    window shows data as soon as there is any, and old and new parts join without a seam."""
    span, resolution = WINDOWS[window]
    since = now - span
    levels = sorted((r for r in Resolution if r <= resolution), reverse=True)  # coarsest first
    points = _rows(deployment_id, levels[0], since)
    cutoff = points[-1][0] + timedelta(seconds=levels[0]) if points else since
    finer: list[tuple] = []
    for level in levels[1:]:
        rows = _rows(deployment_id, level, cutoff)
        finer += rows
        if rows and level != Resolution.RAW:
            cutoff = rows[-1][0] + timedelta(seconds=level)
    buckets: dict[datetime, list[tuple]] = defaultdict(list)
    for row in finer:
        buckets[_bucket(row[0], resolution)].append(row[1:])
    for ts, group in sorted(buckets.items()):
        combined = combine(group)
        points.append((ts, *(combined[name] for name in COLUMNS)))
    return points


def series(deployment: ModelDeployment, window: str, *, now: datetime | None = None) -> dict:
    """Timestamps and one list per metric for `window`, ratios divided at read time. `start` is
    where the chart's axis begins: the window's start, or the first point of a deployment younger
    than the window (:func:`window_start`)."""
    span, resolution = WINDOWS[window]
    now = now or timezone.now()
    rows = window_rows(deployment.pk, window, now=now)
    timestamps = [row[0] for row in rows]
    columns = {name: [row[i + 1] for row in rows] for i, name in enumerate(COLUMNS)}
    return {
        "window": window,
        "resolution_s": int(resolution),
        "start": window_start(deployment.pk, timestamps, since=now - span, now=now),
        "end": now,
        "timestamps": timestamps,
        "series": with_ratios(columns),
        "totals": window_ratios(columns),
    }


MIN_AXIS = timedelta(minutes=5)  # a first point a moment old still sits on an axis of minutes


def window_start(deployment_id: int, timestamps: list[datetime], *, since: datetime, now: datetime) -> datetime:
    """The window's start, unless the deployment has no point before it (younger than the
    window): then its first point, so a new deployment's data fills the chart instead of a
    sliver at its right edge. A gap in an older deployment's data keeps the whole window."""
    if not timestamps or timestamps[0] <= since:
        return since
    if MetricSample.objects.filter(deployment_id=deployment_id, ts__lt=since).exists():
        return since
    return max(since, min(timestamps[0], now - MIN_AXIS))


def summary(deployment: ModelDeployment) -> dict | None:
    """The newest raw point (with its ratios) and the last 24 hours' ratios (sums divided)."""
    raw = MetricSample.objects.filter(
        deployment=deployment, resolution=Resolution.RAW, ts__gte=timezone.now() - RETENTION[Resolution.RAW]
    )
    latest = raw.order_by("-ts").values_list("ts", *COLUMNS).first()
    if latest is None:
        return None
    point = with_ratios({name: [value] for name, value in zip(COLUMNS, latest[1:], strict=True)})
    sums = raw.aggregate(**{name: Sum(name) for name in INCREMENTS})
    return {
        "ts": latest[0].isoformat(),
        **{name: values[0] for name, values in point.items() if name != "prefix_cache_hit_pct_cumulative"},
        "last_24h": window_ratios({name: [value] for name, value in sums.items()}),
    }


def _bucket(ts: datetime, seconds: int) -> datetime:
    epoch = int(ts.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


def _rollup(target: int, source: int, now: datetime) -> int:
    """Combine `source` rows into `target` buckets that are complete and not yet rolled up."""
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
        for row in rows.values_list("ts", *COLUMNS).iterator(chunk_size=2000):
            buckets[_bucket(row[0], target)].append(row[1:])
        MetricSample.objects.bulk_create(
            [
                MetricSample(deployment_id=dep_id, resolution=target, ts=ts, **combine(group))
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
