"""B7 — The monthly usage report for 1,000 deployments × 30 days, from the ledger's rollups.

Seeds the facts the ledger is computed from, for one month (November 2026, 30 days) in SQL:
per deployment one quota reservation (1-4 GPUs, held from a different hour of 1 November),
Ready/Queued transitions every day (serving 19 h a day) and 10-minute token rollups for every
day (4,320 per deployment: 4.3 M rows at 1,000). Then `usage.rollup.refresh_month` writes the
day and month rows, as the beat task does, and the report is read as a platform admin:

1. SQL queries of GET /api/v1/usage/?month=2026-11 (token auth) with a fleet of 1 deployment and
   of N: target equal.
2. Time of the same request (and of the page /usage/ and of usage.reports.monthly_report alone)
   at N vs at 1, measured in the same run: target <= 300 ms and <= 2x.

Also printed: refresh_month's time and statements at both sizes (it runs every 5 minutes in the
background, not on a request), the CSV export's time, and a check that the stored figures equal
the hand formula.

    .venv/bin/python bench/b7_usage_report.py [--deployments 1000] [--days 30] [--repeat 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header, row, setup_django  # noqa: E402

# Pages are rendered without collectstatic (STATIC_MANIFEST=false); WhiteNoise warns about it.
warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
MONTH = date(2026, 11, 1)
START = datetime(2026, 11, 1, tzinfo=UTC)
NOW = datetime(2026, 12, 1, tzinfo=UTC)  # the month is over: every interval ends at its end
TENANTS = 10


def seed_base():
    from django.contrib.auth.models import Group, User

    from portal.api import token_create
    from quotas.models import PLATFORM_ADMIN_GROUP, GpuFlavor, Tenant, TenantQuota

    flavor = GpuFlavor.objects.create(
        name="h100-sxm5",
        gpu_model="H100",
        accelerator_type="H100",
        gpu_memory_gib=80,
        gpus_per_node=8,
        price_per_gpu_hour=Decimal("3.90"),
    )
    tenants = [Tenant.objects.create(slug=f"team-{i:02d}", display_name=f"Team {i}") for i in range(TENANTS)]
    tenants.append(Tenant.objects.create(slug="solo", display_name="Solo"))  # the one-deployment tenant
    for tenant in tenants:
        TenantQuota.objects.create(tenant=tenant, flavor=flavor, nominal_gpus=100_000)
    admin = User.objects.create_user("bench-admin", password="bench-password-123")
    admin.groups.add(Group.objects.get_or_create(name=PLATFORM_ADMIN_GROUP)[0])
    return flavor, tenants, token_create(user=admin, name="bench")[1]


def add_fleet(flavor, tenants, first: int, count: int, days: int) -> list[int]:
    """`count` deployments numbered from `first`, with a month of facts each (SQL, server-side)."""
    from django.db import connection

    from deployments.models import ModelDeployment

    deps = ModelDeployment.objects.bulk_create(
        [
            ModelDeployment(
                tenant=tenants[k % len(tenants)],
                name=f"llm-{k:05d}",
                model_source="meta-llama/Meta-Llama-3-8B-Instruct",
                served_model_name=f"llm-{k}",
                flavor=flavor,
                state="ready",
            )
            for k in range(first, first + count)
        ],
        batch_size=1000,
    )
    ids = [d.pk for d in deps]
    with connection.cursor() as cur:
        # Reservation k: from hour (k mod 24) of 1 November, 1 + (k mod 4) GPUs, still held.
        cur.execute(
            """INSERT INTO quotas_quotareservation (quota_id, owner_type, owner_id, gpus, borrowed_gpus, created)
               SELECT q.id, 'deployment', d.id, 1 + (d.id %% 4), 0, %s + (d.id %% 24) * interval '1 hour'
               FROM deployments_modeldeployment d JOIN quotas_tenantquota q ON q.tenant_id = d.tenant_id
               WHERE d.id = ANY(%s)""",
            [START, ids],
        )
        # Every day: Ready at 01:00, Queued at 20:00 (19 serving hours).
        cur.execute(
            """INSERT INTO deployments_deploymentevent
                   (deployment_id, created, type, from_state, to_state, reason, message)
               SELECT d.id, %s + day * interval '1 day' + s.at, 'Normal', '', s.state, 'Observed', ''
               FROM deployments_modeldeployment d, generate_series(0, %s - 1) day,
                    (VALUES (interval '1 hour', 'ready'), (interval '20 hours', 'queued')) AS s(at, state)
               WHERE d.id = ANY(%s)""",
            [START, days, ids],
        )
        # 10-minute token rollups: 50 prompt and 20 generated tokens per second.
        cur.execute(
            """INSERT INTO deployments_metricsample (deployment_id, ts, resolution, interval_s,
                   prompt_tokens_per_s, generation_tokens_per_s)
               SELECT d.id, ts, 600, 600, 50, 20
               FROM deployments_modeldeployment d,
                    generate_series(%s::timestamptz, %s::timestamptz - interval '10 minutes', interval '10 minutes') ts
               WHERE d.id = ANY(%s)""",
            [START, START + timedelta(days=days), ids],
        )
        cur.execute("ANALYZE")
    return ids


def expected(dep_id: int, days: int) -> tuple[Decimal, Decimal, int]:
    """Hand formula: (reserved GPU-h, serving GPU-h, generated tokens) of deployment `dep_id`."""
    gpus, offset = 1 + dep_id % 4, dep_id % 24
    held = 30 * 24 - offset  # held to the month's end (NOW)
    serving = sum(max(0, 24 * d + 20 - max(24 * d + 1, offset)) for d in range(days))
    return Decimal(held * gpus), Decimal(serving * gpus), days * 144 * 600 * 20


def refresh(ids: list[int]) -> tuple[float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from usage.rollup import refresh_month

    started = time.perf_counter()
    with CaptureQueriesContext(connection) as ctx:
        written = refresh_month(MONTH, now=NOW)
    assert written == len(ids), (written, len(ids))
    elapsed = time.perf_counter() - started
    with connection.cursor() as cur:
        # What autovacuum does for a table that grew from 1 row to 1,000 (its threshold is 50 rows
        # + 10 %): without statistics the planner would plan the report for a one-row table.
        cur.execute("ANALYZE usage_usagemonth, usage_usageday")
    return elapsed, len(ctx.captured_queries)


def measure(token: str, repeat: int, tenant: str = "") -> dict:
    """Queries and times of the report (of every tenant, or of `tenant`): API, page, and the
    report function alone."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from quotas.models import Tenant
    from usage.reports import monthly_report

    api = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {token}")
    page = Client(HTTP_HOST="127.0.0.1")
    page.force_login(User.objects.get(username="bench-admin"))
    query = "?month=2026-11" + (f"&tenant={tenant}" if tenant else "")
    url = "/api/v1/usage/" + query
    covered = Tenant.objects.filter(slug=tenant) if tenant else Tenant.objects.all()
    assert api.get(url).status_code == 200  # warm: the token's last_used write, caches
    with CaptureQueriesContext(connection) as ctx:
        response = api.get(url)
    assert response.status_code == 200, response.content[:300]
    out = {"queries": len(ctx.captured_queries), "sql": [q["sql"] for q in ctx.captured_queries]}
    with CaptureQueriesContext(connection) as ctx:
        monthly_report(covered, month=MONTH)
    out["report_queries"] = len(ctx.captured_queries)

    def times(fn) -> tuple[float, float]:
        fn()
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - started)
        return min(samples), statistics.median(samples)

    out["api"] = times(lambda: api.get(url))
    out["page"] = times(lambda: page.get("/usage/" + query))
    out["report"] = times(lambda: monthly_report(covered, month=MONTH))
    out["count"] = response.json()["count"]
    return out


def csv_time(token: str) -> tuple[float, int]:
    from django.test import Client

    api = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {token}")
    started = time.perf_counter()
    body = b"".join(api.get("/api/v1/usage/csv/?month=2026-11").streaming_content)
    return time.perf_counter() - started, body.count(b"\n") - 1


def check_figures(ids: list[int], days: int) -> None:
    from usage.models import UsageMonth

    rows = {r.deployment_id: r for r in UsageMonth.objects.filter(month=MONTH, deployment_id__in=ids)}
    for dep_id in ids:
        reserved, serving, generated = expected(dep_id, days)
        r = rows[dep_id]
        assert (r.reserved_gpu_hours, r.serving_gpu_hours, r.generation_tokens) == (reserved, serving, generated), (
            dep_id,
            r.reserved_gpu_hours,
            r.serving_gpu_hours,
            r.generation_tokens,
        )
        assert r.cost == reserved * Decimal("3.90"), (dep_id, r.cost)


def ms(pair: tuple[float, float]) -> str:
    return f"{pair[0] * 1000:.1f} ms best, {pair[1] * 1000:.1f} ms median"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30, choices=range(1, 31), metavar="1-30")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    setup_django("b7", STATIC_MANIFEST="false")  # the page is rendered without collectstatic
    header(f"B7 usage report: {args.deployments} deployments x {args.days} days (November 2026)")
    flavor, tenants, token = seed_base()

    one = add_fleet(flavor, tenants[-1:], 0, 1, args.days)  # solo's
    seconds, statements = refresh(one)
    row("refresh_month, fleet of 1", f"{seconds:.2f} s, {statements} statements")
    small = measure(token, args.repeat)

    started = time.perf_counter()
    rest = add_fleet(flavor, tenants[:-1], 1, args.deployments - 1, args.days)
    row(f"seeding {args.deployments - 1} more deployments' facts (SQL)", f"{time.perf_counter() - started:.1f} s")
    seconds, statements = refresh(one + rest)
    row(f"refresh_month, fleet of {args.deployments}", f"{seconds:.2f} s, {statements} statements")
    check_figures(one + rest, args.days)
    row("stored figures = hand formula (reserved, serving, tokens, $)", "yes")
    large = measure(token, args.repeat)
    assert large["count"] == args.deployments, large["count"]
    solo = measure(token, args.repeat, tenant="solo")  # one deployment's report, same database state
    assert solo["count"] == 1, solo["count"]

    row("SQL queries, API, fleet of 1 vs N", f"{small['queries']} vs {large['queries']}", target="equal")
    row("SQL queries, monthly_report(), fleet of 1 vs N", f"{small['report_queries']} vs {large['report_queries']}")
    print("   -- the same request at a fleet of 1 (measured first) and of N")
    for key, label in (("api", "GET /api/v1/usage/"), ("page", "GET /usage/ (page)"), ("report", "monthly_report()")):
        row(f"{label}, fleet of 1", ms(small[key]))
        row(f"{label}, fleet of {args.deployments}", ms(large[key]), target="<= 300 ms")
        ratio_best = large[key][0] / small[key][0]
        ratio_median = large[key][1] / small[key][1]
        row(f"{label}, ratio N / 1", f"{ratio_best:.2f}x best, {ratio_median:.2f}x median", target="<= 2x")
    print("   -- the same run, after seeding: a one-deployment report (?tenant=solo) vs the fleet's")
    for key, label in (("api", "GET /api/v1/usage/"), ("page", "GET /usage/ (page)"), ("report", "monthly_report()")):
        row(f"{label}, one deployment (tenant=solo)", ms(solo[key]))
        ratio_best, ratio_median = large[key][0] / solo[key][0], large[key][1] / solo[key][1]
        row(f"{label}, ratio N / one", f"{ratio_best:.2f}x best, {ratio_median:.2f}x median", target="<= 2x")
    seconds, lines = csv_time(token)
    row(f"CSV export, {lines} rows", f"{seconds * 1000:.0f} ms")
    if small["queries"] != large["queries"]:
        print("\n".join(large["sql"]))
        raise SystemExit("query count depends on the fleet size")


if __name__ == "__main__":
    main()
