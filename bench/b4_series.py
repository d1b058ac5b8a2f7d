"""B4 — Dashboard data: metrics.store.series() over 7 days vs 1 day.

Seeds one deployment with 7 days of 15 s samples (40,320 raw rows, bulk_create), runs
`downsample(now=...)` once as the periodic task would, then times `series()` for every window
(in-process, and through GET /api/v1/deployments/<id>/metrics/?window=...).
Targets: series(7d) <= 150 ms and series(7d) / series(24h) <= 1.5. Also reports the table before
and after downsampling (rows per resolution, bytes) to show that storage is bounded.

    .venv/bin/python bench/b4_series.py [--days 7]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_of, header, row, setup_django  # noqa: E402


def seed(days: int, now: datetime):
    from decimal import Decimal

    from django.contrib.auth.models import Group, User

    from deployments.models import ModelDeployment
    from metrics.models import MetricSample, Resolution
    from quotas.models import PLATFORM_ADMIN_GROUP, GpuFlavor, Tenant
    from runtime.exposition.derive import SERIES_FIELDS

    flavor = GpuFlavor.objects.create(
        name="h100-sxm5",
        gpu_model="H100",
        accelerator_type="H100",
        gpu_memory_gib=80,
        gpus_per_node=8,
        price_per_gpu_hour=Decimal("3.90"),
    )
    tenant = Tenant.objects.create(slug="team-00", display_name="Team 0")
    admin = User.objects.create_user("bench-admin", password="bench-password-123")
    admin.groups.add(Group.objects.get_or_create(name=PLATFORM_ADMIN_GROUP)[0])
    dep = ModelDeployment.objects.create(
        tenant=tenant,
        name="llm-00000",
        model_source="meta-llama/Meta-Llama-3-8B",
        served_model_name="llama",
        flavor=flavor,
        state="ready",
        created_by=admin,
    )
    start = now - timedelta(days=days)
    count = days * 86400 // 15
    started = time.perf_counter()
    batch = []
    for i in range(count):
        ts = start + timedelta(seconds=15 * i)
        wave = 0.5 + 0.5 * math.sin(i / 240)
        values = {name: round(wave * (k + 1) * 10 + (i % 7), 3) for k, name in enumerate(SERIES_FIELDS)}
        batch.append(MetricSample(deployment=dep, ts=ts, resolution=Resolution.RAW, interval_s=15.0, **values))
        if len(batch) == 5000:
            MetricSample.objects.bulk_create(batch)
            batch = []
    MetricSample.objects.bulk_create(batch)
    return dep, admin, count, time.perf_counter() - started


def table_state() -> tuple[dict[int, int], int]:
    from django.db import connection
    from django.db.models import Count

    from metrics.models import MetricSample

    rows = dict(MetricSample.objects.values_list("resolution").annotate(n=Count("id")).values_list("resolution", "n"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_total_relation_size('deployments_metricsample')")
        size = cursor.fetchone()[0]
    return rows, size


def vacuum(full: bool) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM {'FULL ' if full else ''}ANALYZE deployments_metricsample")


@contextmanager
def counting():
    """Count SQL statements run on the default connection (without keeping their text)."""
    from django.db import connection

    box = {"queries": 0}

    def wrapper(execute, sql, params, many, context):
        box["queries"] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield box


def fmt_rows(rows: dict[int, int]) -> str:
    names = {15: "15s", 60: "1m", 600: "10m"}
    return ", ".join(f"{names.get(k, k)}={v}" for k, v in sorted(rows.items())) + f" (total {sum(rows.values())})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=7)
    args = parser.parse_args()
    setup_django("b4")
    header(f"B4 dashboard series: one deployment, {args.days} days of 15 s samples")

    from rest_framework.test import APIClient

    from metrics.store import WINDOWS, downsample, series

    now = datetime.now(tz=UTC).replace(second=0, microsecond=0)
    dep, admin, count, insert_s = seed(args.days, now)
    vacuum(full=False)
    before_rows, before_size = table_state()
    row("raw rows inserted (bulk_create)", f"{count} in {insert_s:.1f} s")
    row("before downsample: rows", fmt_rows(before_rows))
    row("before downsample: table+indexes", f"{before_size / 2**20:.1f} MiB")

    # Before any rollup exists, a long window combines raw rows on the fly (metrics.store.window_rows):
    # the cost of showing data at once; the downsample task makes it a rollup read again.
    for window in ("24h", "7d"):
        points = len(series(dep, window, now=now)["timestamps"])
        fastest, median = best_of(lambda w=window: series(dep, w, now=now), repeat=3)
        row(f"before downsample: series({window}) from raw rows", f"{points} points, best {fastest * 1e3:.0f} ms")

    started = time.perf_counter()
    with counting() as first:
        result = downsample(now=now)
    row(
        "downsample(now) once over the whole backlog",
        f"{time.perf_counter() - started:.2f} s, {first['queries']} SQL statements  {result}",
    )
    started = time.perf_counter()
    with counting() as second:
        again = downsample(now=now + timedelta(minutes=1))
    row(
        "downsample one minute later (steady-state run)",
        f"{time.perf_counter() - started:.2f} s, {second['queries']} SQL statements  {again}",
    )
    after_rows, after_size = table_state()
    vacuum(full=False)
    _, after_vacuum = table_state()
    vacuum(full=True)
    _, after_full = table_state()
    row("after downsample: rows", fmt_rows(after_rows))
    row(
        "after: bytes (no vacuum / VACUUM / VACUUM FULL)",
        f"{after_size / 2**20:.1f} / {after_vacuum / 2**20:.1f} / {after_full / 2**20:.1f} MiB",
    )
    row("rows after / before", f"{sum(after_rows.values()) / sum(before_rows.values()):.2f}x")

    timings = {}
    for window in WINDOWS:
        data = series(dep, window, now=now)
        fastest, median = best_of(lambda w=window: series(dep, w, now=now), repeat=15)
        timings[window] = (fastest, median, len(data["timestamps"]))
    client = APIClient()
    client.force_authenticate(admin)
    api = {}
    for window in ("24h", "7d"):
        url = f"/api/v1/deployments/{dep.pk}/metrics/?window={window}"
        assert client.get(url, HTTP_HOST="127.0.0.1").status_code == 200
        api[window] = best_of(lambda u=url: client.get(u, HTTP_HOST="127.0.0.1"), repeat=15)
    for window, (fastest, median, points) in timings.items():
        row(
            f"series({window}): points, best / median ms",
            f"{points}, {fastest * 1e3:.1f} / {median * 1e3:.1f}",
            target="<= 150 ms" if window == "7d" else "",
        )
    for window, (fastest, median) in api.items():
        row(f"GET .../metrics/?window={window}: best / median ms", f"{fastest * 1e3:.1f} / {median * 1e3:.1f}")
    row("series(7d) / series(24h) (best)", f"{timings['7d'][0] / timings['24h'][0]:.2f}x", target="<= 1.5")
    row("series(7d) / series(24h) (median)", f"{timings['7d'][1] / timings['24h'][1]:.2f}x")


if __name__ == "__main__":
    main()
