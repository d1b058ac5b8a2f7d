"""The usage ledger, computed from facts the portal already records. Pure: no ORM, no clock.

* Reserved GPU-hours: every interval a quota reservation was held (created → released, or now)
  × its GPUs. This is what a tenant is charged for: quota held is quota nobody else can use.
* Serving GPU-hours: the part of the reserved intervals while the deployment was Ready or
  Degraded (admitted by the cluster and answering), × the reserved GPUs. Autoscaled replicas
  below the maximum are not visible to the portal, so serving hours count the reserved GPUs.
* Utilisation: serving / reserved.
* Tokens: the engine's prompt and generation counters as increments per scrape interval
  (runtime.exposition.derive turns counter resets and scrape gaps into the right increments;
  metrics rollups keep their sums), attributed to the day of each sample.
* Cost: reserved GPU-hours × the flavor's price per GPU-hour; unknown (None, never 0) when some
  of the hours are on a flavor without a price.

Every interval is cut at local midnight (settings.TIME_ZONE), so days and calendar months add up.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo
from decimal import Decimal

from deployments.states import SERVING
from quotas.pricing import gpu_hours_cost

HOURS = Decimal(3600)
SIX_PLACES = Decimal("0.000001")


@dataclass(frozen=True)
class Held:
    """One quota reservation: GPUs held from `start` until `end` (None: still held)."""

    start: datetime
    end: datetime | None
    gpus: int
    price: Decimal | None  # the flavor's price per GPU-hour (None: unpriced)


@dataclass
class Figures:
    """One day's or one month's ledger of one deployment."""

    reserved_gpu_hours: Decimal = Decimal(0)
    serving_gpu_hours: Decimal = Decimal(0)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    priced_cost: Decimal = Decimal(0)
    unpriced_gpu_hours: Decimal = Decimal(0)
    notes: list[str] = field(default_factory=list)

    @property
    def cost(self) -> Decimal | None:
        """$ for the reserved hours; None when some of them have no price."""
        return None if self.unpriced_gpu_hours else self.priced_cost

    @property
    def utilisation_pct(self) -> float | None:
        if not self.reserved_gpu_hours:
            return None
        return float(100 * self.serving_gpu_hours / self.reserved_gpu_hours)

    def add(self, other: Figures) -> None:
        self.reserved_gpu_hours += other.reserved_gpu_hours
        self.serving_gpu_hours += other.serving_gpu_hours
        self.prompt_tokens += other.prompt_tokens
        self.generation_tokens += other.generation_tokens
        self.priced_cost += other.priced_cost
        self.unpriced_gpu_hours += other.unpriced_gpu_hours

    def rounded(self) -> Figures:
        """The same figures at the stored precision (six decimals)."""
        return Figures(
            reserved_gpu_hours=self.reserved_gpu_hours.quantize(SIX_PLACES),
            serving_gpu_hours=self.serving_gpu_hours.quantize(SIX_PLACES),
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
            priced_cost=self.priced_cost.quantize(SIX_PLACES),
            unpriced_gpu_hours=self.unpriced_gpu_hours.quantize(SIX_PLACES),
        )


def cost_per_million(cost: Decimal | None, generation_tokens: int) -> Decimal | None:
    """$ per 1M output (generated) tokens; None without a cost or without tokens."""
    if cost is None or not generation_tokens:
        return None
    return cost * 1_000_000 / generation_tokens


def month_bounds(month: date, tz: tzinfo) -> tuple[datetime, datetime]:
    """The first instant of `month` (any day in it) and of the next month, in `tz`."""
    first = month.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    return _midnight(first, tz), _midnight(following, tz)


def _midnight(day: date, tz: tzinfo) -> datetime:
    """Local midnight as a UTC instant. Always UTC: Python subtracts and compares two datetimes
    that share a tzinfo by their wall clocks, which would give a 23-hour DST day 24 hours."""
    return datetime(day.year, day.month, day.day, tzinfo=tz).astimezone(UTC)


def _seconds(delta: timedelta) -> Decimal:
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / 1_000_000


def day_pieces(start: datetime, end: datetime, tz: tzinfo) -> Iterator[tuple[date, datetime, datetime]]:
    """[start, end) cut at each local midnight: (local day, piece start, piece end)."""
    cursor, end = start.astimezone(UTC), end.astimezone(UTC)
    while cursor < end:
        day = cursor.astimezone(tz).date()
        next_midnight = _midnight(day + timedelta(days=1), tz)
        piece_end = min(end, next_midnight)
        yield day, cursor, piece_end
        cursor = piece_end


def serving_intervals(
    transitions: Iterable[tuple[datetime, str]], *, until: datetime
) -> list[tuple[datetime, datetime]]:
    """When the deployment was serving, from its state transitions (time, new state) in time
    order: from each move into a serving state (states.SERVING: Ready, Degraded) until the next
    move out (or `until`). The states are plain strings; a State member equals its string."""
    out: list[tuple[datetime, datetime]] = []
    since: datetime | None = None
    for at, state in transitions:
        if at >= until:
            break
        if state in SERVING and since is None:
            since = at
        elif state not in SERVING and since is not None:
            out.append((since, at))
            since = None
    if since is not None:
        out.append((since, until))
    return out


def _overlap(a: tuple[datetime, datetime], b: tuple[datetime, datetime]) -> timedelta:
    return max(timedelta(0), min(a[1], b[1]) - max(a[0], b[0]))


def _served(serving: list[tuple[datetime, datetime]], ends: list[datetime], a: datetime, b: datetime) -> timedelta:
    """Time serving inside [a, b): the intervals are sorted and disjoint, so start at the first
    one that ends after `a` and stop at the first that starts at or after `b`."""
    total = timedelta(0)
    for interval in serving[bisect_right(ends, a) :]:
        if interval[0] >= b:
            break
        total += _overlap((a, b), interval)
    return total


def ledger_days(
    *,
    held: Iterable[Held],
    transitions: Iterable[tuple[datetime, str]],
    tokens: dict[date, tuple[float, float]],
    start: datetime,
    end: datetime,
    now: datetime,
    tz: tzinfo,
) -> dict[date, Figures]:
    """One deployment's figures per local day in [start, min(end, now)).

    `tokens` maps a day to its (prompt, generation) token increments.
    """
    start, stop = start.astimezone(UTC), min(end, now).astimezone(UTC)
    serving = serving_intervals(transitions, until=stop)
    ends = [e for _, e in serving]
    days: dict[date, Figures] = {}
    for r in held:
        lo, hi = max(r.start, start), min(r.end or stop, stop)
        for day, a, b in day_pieces(lo, hi, tz):
            fig = days.setdefault(day, Figures())
            hours = _seconds(b - a) * r.gpus / HOURS
            fig.reserved_gpu_hours += hours
            cost = gpu_hours_cost(hours, r.price)  # the one price rule (quotas.pricing)
            if cost is None:
                fig.unpriced_gpu_hours += hours
            else:
                fig.priced_cost += cost
            served = _served(serving, ends, a, b)
            fig.serving_gpu_hours += _seconds(served) * r.gpus / HOURS
    for day, (prompt, generation) in tokens.items():
        fig = days.setdefault(day, Figures())
        fig.prompt_tokens += round(prompt)
        fig.generation_tokens += round(generation)
    return {day: fig.rounded() for day, fig in sorted(days.items())}


def month_total(days: Iterable[Figures]) -> Figures:
    """The sum of a month's days."""
    total = Figures()
    for fig in days:
        total.add(fig)
    return total


def month_note(total: Figures, *, unpriced_flavors: Iterable[str] = ()) -> str:
    """Why a month cost what it did, where the figures alone would puzzle: GPUs held but never
    serving, or a price that is not known."""
    notes = []
    if total.reserved_gpu_hours and not total.serving_gpu_hours:
        notes.append(
            "Never served this month: GPUs were reserved (approved, queued or starting) but the "
            "deployment was never Ready, so it costs reserved hours only."
        )
    names = sorted(set(unpriced_flavors))
    if total.unpriced_gpu_hours and names:
        notes.append(f"Cost unknown: no price per GPU-hour for {', '.join(names)}.")
    return " ".join(notes)[:300]
