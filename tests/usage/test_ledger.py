"""The usage ledger against hand-computed figures, to the cent, with a frozen clock (`now` passed
explicitly): reservation intervals split at month and day boundaries, serving intervals from the
deployment's transitions, tokens from engine counters through a counter reset, a scrape gap and
the metrics rollups, unpriced flavors, and the month written to the stored rollups."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from deployments.models import DeploymentEvent, ModelDeployment
from metrics.models import MetricSample, Resolution
from metrics.store import downsample, new_sample
from quotas.models import QuotaReservation, TenantQuota
from runtime.exposition.derive import derive
from runtime.exposition.snapshot import Snapshot
from usage.ledger import Held, day_pieces, ledger_days, month_bounds, serving_intervals
from usage.models import UsageDay, UsageMonth
from usage.rollup import refresh_month, token_days

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)  # the frozen clock
NOV = date(2026, 11, 1)
CENT = Decimal("0.01")


def at(day: int, hour: int, minute: int = 0, second: int = 0, month: int = 11) -> datetime:
    return datetime(2026, month, day, hour, minute, second, tzinfo=UTC)


class TestPureLedger:
    def test_an_interval_is_cut_at_local_midnight_including_a_23_hour_dst_day(self):
        berlin = ZoneInfo("Europe/Berlin")
        start = datetime(2026, 3, 28, 23, 0, tzinfo=berlin)
        end = datetime(2026, 3, 30, 1, 0, tzinfo=berlin)
        pieces = [(day, (b - a).total_seconds() / 3600) for day, a, b in day_pieces(start, end, berlin)]
        # 28th: one hour; 29th: clocks go forward at 02:00, so the day has 23 hours; 30th: one hour.
        assert pieces == [(date(2026, 3, 28), 1.0), (date(2026, 3, 29), 23.0), (date(2026, 3, 30), 1.0)]

    def test_a_reservation_across_a_month_boundary_is_split_in_the_configured_time_zone(self):
        berlin = ZoneInfo("Europe/Berlin")  # November begins at 23:00 UTC on 31 October (CET, UTC+1)
        held = [Held(at(31, 22, 30, month=10), at(31, 23, 30, month=10), 2, Decimal("3.90"))]
        oct_start, oct_end = month_bounds(date(2026, 10, 1), berlin)
        nov_start, nov_end = month_bounds(NOV, berlin)
        assert nov_start == at(31, 23, month=10)
        october = ledger_days(held=held, transitions=[], tokens={}, start=oct_start, end=oct_end, now=NOW, tz=berlin)
        november = ledger_days(held=held, transitions=[], tokens={}, start=nov_start, end=nov_end, now=NOW, tz=berlin)
        assert october[date(2026, 10, 31)].reserved_gpu_hours == Decimal("1.000000")  # 0.5 h × 2 GPUs
        assert november[date(2026, 11, 1)].reserved_gpu_hours == Decimal("1.000000")
        assert october[date(2026, 10, 31)].cost == november[date(2026, 11, 1)].cost == Decimal("3.900000")

    def test_serving_runs_from_ready_or_degraded_until_the_next_other_state(self):
        moves = [
            (at(1, 0), "approved"),
            (at(1, 1), "ready"),
            (at(1, 2), "degraded"),  # still serving: no new interval
            (at(1, 3), "queued"),
            (at(1, 4), "ready"),
        ]
        assert serving_intervals(moves, until=at(1, 6)) == [(at(1, 1), at(1, 3)), (at(1, 4), at(1, 6))]

    def test_an_unpriced_flavor_makes_the_cost_unknown_not_zero(self):
        start, end = month_bounds(NOV, UTC)
        days = ledger_days(
            held=[Held(at(5, 0), at(5, 6), 1, None)], transitions=[], tokens={}, start=start, end=end, now=NOW, tz=UTC
        )
        assert days[date(2026, 11, 5)].reserved_gpu_hours == Decimal("6.000000")
        assert days[date(2026, 11, 5)].cost is None


# --- the same through the database: facts → stored rollups -----------------------------------------


def _deployment(world, name: str, flavor) -> ModelDeployment:
    return ModelDeployment.objects.create(
        tenant=world.alpha, name=name, model_source="m", served_model_name=name, flavor=flavor, state="ready"
    )


def _reserve(dep: ModelDeployment, gpus: int, created: datetime, released: datetime | None) -> None:
    quota = TenantQuota.objects.get(tenant=dep.tenant, flavor=dep.flavor)
    row = QuotaReservation.objects.create(quota=quota, owner_type="deployment", owner_id=dep.pk, gpus=gpus)
    QuotaReservation.objects.filter(pk=row.pk).update(created=created, released=released)  # auto_now_add


def _moves(dep: ModelDeployment, moves: list[tuple[datetime, str]]) -> None:
    for when, state in moves:
        event = DeploymentEvent.objects.create(deployment=dep, reason="Observed", to_state=state)
        DeploymentEvent.objects.filter(pk=event.pk).update(created=when)
    # an event without a transition (a Kubernetes event) changes nothing
    DeploymentEvent.objects.create(deployment=dep, reason="Pulling", message="image")


def _snapshot(ts: datetime, prompt: float, generation: float) -> Snapshot:
    key = (("engine", "0"), ("model_name", "m"))
    return Snapshot(
        timestamp=ts.timestamp(),
        counters={"prompt_tokens_total": {key: prompt}, "generation_tokens_total": {key: generation}},
    )


def _store(dep: ModelDeployment, snapshots: list[Snapshot], prev: Snapshot | None) -> Snapshot | None:
    samples = []
    for snap in snapshots:
        samples.append(new_sample(dep.pk, derive(prev, snap)))
        prev = snap
    MetricSample.objects.bulk_create(samples)
    return prev


@pytest.fixture
def facts(world):
    """Two deployments of alpha in November 2026, with a clock frozen at NOW (20 Nov, 12:00 UTC).

    chat (H100, $3.90 per GPU-hour):
      reservation 1: 31 Oct 22:00 → 2 Nov 10:00, 2 GPUs. November part: 34 h × 2 = 68 GPU-h.
      reservation 2: 10 Nov 08:00 → still held at NOW, 4 GPUs: 244 h × 4 = 976 GPU-h.
      reserved = 1,044 GPU-h; cost = 1,044 × 3.90 = $4,071.60.
      serving: Ready 31 Oct 23:00 (Degraded 1 Nov 05:30, Ready 06:00) → Stopped 2 Nov 10:00:
      34 h × 2 = 68; Ready 10 Nov 09:00 → Queued 15 Nov 09:00 (120 h) and Ready 15 Nov 11:00 →
      NOW (121 h): 241 h × 4 = 964. serving = 1,032 GPU-h; utilisation 98.85 %.
      tokens (engine counters, prompt/generation): 12 Nov 10:00:00 1000/500 (first read: no
      increment), +15 s 1600/800 (+600/+300), +15 s 200/50 (counter reset: +200/+50), scrapes fail
      for 5 min, then 1200/550 (+1000/+500); 20 Nov 10:59:50 4200/1550 after an 8-day gap
      (+3000/+1000); 11:30 4500/1700 (+300/+150), stored after the rollups ran at 11:00.
      prompt = 5,100, generation = 2,000; $ per 1M output tokens = 4,071.60 / 2,000 × 1M = $2,035,800.00.
    batch (A100, no price): reservation 5 Nov 00:00 → 06:00, 1 GPU, approved then queued, never
      ready: 6 reserved GPU-h, 0 serving, cost unknown, and a note that says why.
    """
    chat = _deployment(world, "chat", world.h100)
    _reserve(chat, 2, at(31, 22, month=10), at(2, 10))
    _reserve(chat, 4, at(10, 8), None)
    _moves(
        chat,
        [
            (at(31, 22, month=10), "approved"),
            (at(31, 23, month=10), "ready"),
            (at(1, 5, 30), "degraded"),
            (at(1, 6), "ready"),
            (at(2, 10), "stopped"),
            (at(10, 8), "approved"),
            (at(10, 8, 30), "provisioning"),
            (at(10, 9), "ready"),
            (at(15, 9), "queued"),
            (at(15, 11), "ready"),
        ],
    )
    t0 = at(12, 10)
    prev = _store(
        chat,
        [
            _snapshot(t0, 1000, 500),
            _snapshot(t0 + timedelta(seconds=15), 1600, 800),
            _snapshot(t0 + timedelta(seconds=30), 200, 50),
            _snapshot(t0 + timedelta(seconds=330), 1200, 550),
            _snapshot(at(20, 10, 59, 50), 4200, 1550),
        ],
        None,
    )
    downsample(now=at(20, 11))  # 10-minute rollups; raw and 1-minute rows past retention go
    _store(chat, [_snapshot(at(20, 11, 30), 4500, 1700)], prev)
    batch = _deployment(world, "batch", world.a100)
    _reserve(batch, 1, at(5, 0), at(5, 6))
    _moves(batch, [(at(5, 0), "approved"), (at(5, 0, 10), "queued"), (at(5, 6), "stopped")])
    return chat, batch


class TestStoredLedger:
    def test_tokens_survive_a_counter_reset_a_scrape_gap_and_the_rollups_counted_once(self, facts):
        chat, _ = facts
        # The 12 Nov raw points were rolled up and deleted; 20 Nov has a 10-minute rollup, its raw
        # point (still within retention) and one raw point after the last rollup.
        assert not MetricSample.objects.filter(deployment=chat, ts__lt=at(13, 0), resolution=Resolution.RAW).exists()
        assert MetricSample.objects.filter(deployment=chat, resolution=Resolution.RAW, ts__gte=at(20, 0)).count() == 2
        days = token_days(chat.pk, *month_bounds(NOV, UTC))
        assert {day: (round(p), round(g)) for day, (p, g) in days.items()} == {
            date(2026, 11, 12): (1800, 850),
            date(2026, 11, 20): (3300, 1150),
        }

    def test_the_month_matches_the_hand_computed_ledger_to_the_cent(self, facts):
        chat, batch = facts
        assert refresh_month(NOV, now=NOW) == 2
        row = UsageMonth.objects.get(deployment=chat, month=NOV)
        assert row.reserved_gpu_hours == Decimal("1044")
        assert row.serving_gpu_hours == Decimal("1032")
        assert row.cost.quantize(CENT) == Decimal("4071.60")
        assert (row.prompt_tokens, row.generation_tokens) == (5100, 2000)
        assert row.note == ""
        other = UsageMonth.objects.get(deployment=batch, month=NOV)
        assert (other.reserved_gpu_hours, other.serving_gpu_hours, other.cost) == (Decimal("6"), Decimal("0"), None)
        assert "Never served" in other.note and "no price per GPU-hour for a100-pcie" in other.note

    def test_days_add_up_to_the_month_and_the_boundary_day_is_split(self, facts):
        chat, _ = facts
        refresh_month(NOV, now=NOW)
        refresh_month(date(2026, 10, 1), now=NOW)
        days = UsageDay.objects.filter(deployment=chat, day__gte=NOV)
        assert sum(d.reserved_gpu_hours for d in days) == Decimal("1044")
        assert days.get(day=date(2026, 11, 1)).reserved_gpu_hours == Decimal("48")  # 24 h × 2
        assert days.get(day=date(2026, 11, 20)).reserved_gpu_hours == Decimal("48")  # 12 h × 4, up to NOW
        october = UsageMonth.objects.get(deployment=chat, month=date(2026, 10, 1))
        # 31 Oct 22:00 → 24:00 held (2 h × 2 GPUs), Ready from 23:00 (1 h × 2).
        assert (october.reserved_gpu_hours, october.serving_gpu_hours) == (Decimal("4"), Decimal("2"))
        assert october.cost.quantize(CENT) == Decimal("15.60")

    def test_refreshing_again_later_recomputes_in_place(self, facts):
        chat, _ = facts
        refresh_month(NOV, now=NOW)
        refresh_month(NOV, now=NOW + timedelta(hours=1))  # one more hour of 4 GPUs held and serving
        row = UsageMonth.objects.get(deployment=chat, month=NOV)
        assert (row.reserved_gpu_hours, row.serving_gpu_hours) == (Decimal("1048"), Decimal("1036"))
        assert UsageMonth.objects.filter(deployment=chat).count() == 1
        assert UsageDay.objects.filter(deployment=chat, day=date(2026, 11, 20)).count() == 1


class TestRefreshCost:
    def test_the_statements_of_a_refresh_do_not_grow_with_the_fleet(self, world):
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        deps = []
        for k in range(5):
            dep = _deployment(world, f"d{k}", world.h100)
            _reserve(dep, 1, at(3, 0), None)
            _moves(dep, [(at(3, 0), "approved"), (at(3, 1), "ready")])
            _store(dep, [_snapshot(at(4, 10, 0, s), 10 * s, 5 * s) for s in (0, 15, 30)], None)
            deps.append(dep)
        downsample(now=at(4, 11))  # 10-minute rollups, and raw rows after them
        for dep in deps:
            _store(dep, [_snapshot(at(4, 11, 30), 900, 450)], _snapshot(at(4, 10, 0, 30), 300, 150))
        counts = []
        for chosen in (deps[:1], deps):
            with CaptureQueriesContext(connection) as ctx:
                assert refresh_month(NOV, now=NOW, ids={d.pk for d in chosen}) == len(chosen)
            counts.append(len(ctx.captured_queries))
        assert counts[0] == counts[1]
        row = UsageMonth.objects.get(deployment=deps[4], month=NOV)
        assert (row.prompt_tokens, row.generation_tokens) == (900, 450)  # 300 + 600 after the rollup


class TestTimeZone:
    def test_months_and_token_days_follow_the_configured_time_zone(self, world, settings):
        settings.TIME_ZONE = "Europe/Berlin"  # November begins at 23:00 UTC on 31 October
        dep = _deployment(world, "late", world.h100)
        _reserve(dep, 1, at(31, 22, month=10), at(31, 23, 30, month=10))  # 1 h in October, 0.5 h in November
        prev = _store(dep, [_snapshot(at(31, 22, 50, month=10), 0, 0)], None)
        _store(dep, [_snapshot(at(31, 23, 10, month=10), 100, 40)], prev)  # 00:10 in Berlin: November
        refresh_month(NOV, now=NOW)
        refresh_month(date(2026, 10, 1), now=NOW)
        november = UsageMonth.objects.get(deployment=dep, month=NOV)
        october = UsageMonth.objects.get(deployment=dep, month=date(2026, 10, 1))
        assert (november.reserved_gpu_hours, october.reserved_gpu_hours) == (Decimal("0.5"), Decimal("1"))
        assert (november.generation_tokens, october.generation_tokens) == (40, 0)
        assert UsageDay.objects.get(deployment=dep, day__gte=NOV).day == date(2026, 11, 1)
