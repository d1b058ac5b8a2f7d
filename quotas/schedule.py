"""Serving schedules: when a tenant's deployments may run (Tenant.serving_schedule). Pure: no ORM.

A schedule is one or more windows separated by ";" or ",", each ``[DAYS] HH:MM-HH:MM``:

* DAYS is a day (``mon`` … ``sun``, or the full name), a range (``mon-fri``; ``fri-mon`` wraps
  over the weekend), ``daily``, ``weekdays`` (mon-fri) or ``weekends`` (sat-sun); left out, every
  day. A list of single days is written as several windows (``mon 08:00-12:00; wed 08:00-12:00``):
  a comma separates windows, so ``mon,wed 08:00-12:00`` is refused rather than guessed at.
* the times are wall-clock times in the portal's time zone (settings.TIME_ZONE); ``24:00`` ends
  a day. An end before the start runs past midnight into the next day (``fri 22:00-02:00``
  ends Saturday at 02:00); the window belongs to the day it starts on.

The empty schedule means "always". reclaim.schedules stops a tenant's deployments while its
schedule is closed and starts the ones it stopped when it opens again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_GROUPS = {"daily": tuple(range(7)), "weekdays": tuple(range(5)), "weekends": (5, 6)}
DAY = 24 * 60
WEEK = 7 * DAY
MAX_WINDOWS = 28
_TIMES = re.compile(r"^([0-9]{1,2}):([0-9]{2})-([0-9]{1,2}):([0-9]{2})$")
EXAMPLE = "e.g. 'mon-fri 08:00-20:00' or 'mon-fri 08:00-20:00; sat 10:00-14:00'"


class ScheduleError(ValueError):
    """The schedule text cannot be read; the message says where and how to write it."""


@dataclass(frozen=True)
class Window:
    """One window: the weekdays it starts on (Monday 0) and its minutes after midnight. `end` is
    past 1440 for a window that runs over midnight."""

    days: tuple[int, ...]
    start: int
    end: int


def _day(name: str, part: str) -> int:
    low = name.lower()
    if low in DAY_NAMES:
        return DAY_NAMES.index(low)
    if low in _FULL_NAMES:
        return _FULL_NAMES.index(low)
    raise ScheduleError(f"“{part}”: {name!r} is not a day; use mon, tue, wed, thu, fri, sat or sun.")


def _days(text: str, part: str) -> tuple[int, ...]:
    low = text.lower()
    if low in _GROUPS:
        return _GROUPS[low]
    if "-" not in text:
        return (_day(text, part),)
    first, _, last = text.partition("-")
    a, b = _day(first, part), _day(last, part)
    return tuple((a + i) % 7 for i in range((b - a) % 7 + 1))


def _minutes(hours: str, minutes: str, part: str, *, end: bool) -> int:
    h, m = int(hours), int(minutes)
    if m > 59 or h > 24 or (h == 24 and (m or not end)):
        raise ScheduleError(f"“{part}”: {hours}:{minutes} is not a time of day (00:00 to 23:59; 24:00 as an end).")
    return h * 60 + m


def _window(part: str) -> Window:
    tokens = part.split()
    if len(tokens) > 2 or not tokens:
        raise ScheduleError(f"“{part}”: write a window as days and times, {EXAMPLE}.")
    match = _TIMES.match(tokens[-1])
    if match is None:
        if len(tokens) == 1 and not any(c.isdigit() for c in tokens[0]):
            raise ScheduleError(
                f"“{part}”: give the times too, e.g. '{tokens[0]} 08:00-20:00' (a comma separates windows)."
            )
        raise ScheduleError(f"“{part}”: {tokens[-1]!r} is not a time range such as 08:00-20:00.")
    start = _minutes(match[1], match[2], part, end=False)
    end = _minutes(match[3], match[4], part, end=True)
    if start == end:
        raise ScheduleError(f"“{part}”: the window is empty; use 00:00-24:00 for a whole day.")
    if end < start:
        end += DAY  # runs past midnight into the next day
    days = _days(tokens[0], part) if len(tokens) == 2 else _GROUPS["daily"]
    return Window(days=days, start=start, end=end)


def _merge(windows: tuple[Window, ...]) -> tuple[tuple[int, int], ...]:
    """The open minutes of the week as sorted, disjoint [start, end) stretches within [0, WEEK)."""
    spans: list[tuple[int, int]] = []
    for w in windows:
        for day in w.days:
            start, end = day * DAY + w.start, day * DAY + w.end
            if end > WEEK:  # Sunday night into Monday morning
                spans += [(start, WEEK), (0, end - WEEK)]
            else:
                spans.append((start, end))
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return tuple((a, b) for a, b in merged)


def _zone(tz: ZoneInfo | None) -> ZoneInfo:
    if tz is not None:
        return tz
    from django.conf import settings

    return ZoneInfo(settings.TIME_ZONE)


@dataclass(frozen=True)
class Schedule:
    """A parsed serving schedule. With no windows it is always open."""

    text: str
    windows: tuple[Window, ...]

    @property
    def always(self) -> bool:
        return self.spans == ((0, WEEK),) or not self.windows

    @property
    def spans(self) -> tuple[tuple[int, int], ...]:
        return _merge(self.windows)

    def _local(self, at: datetime, tz: ZoneInfo | None) -> tuple[datetime, int]:
        local = at.astimezone(_zone(tz)).replace(second=0, microsecond=0)
        return local, local.weekday() * DAY + local.hour * 60 + local.minute

    def _span_at(self, minute: int) -> tuple[int, int] | None:
        return next(((a, b) for a, b in self.spans if a <= minute < b), None)

    def is_open(self, at: datetime, tz: ZoneInfo | None = None) -> bool:
        """Whether deployments may run at `at` (an aware datetime)."""
        if self.always:
            return True
        return self._span_at(self._local(at, tz)[1]) is not None

    def opened_at(self, at: datetime, tz: ZoneInfo | None = None) -> datetime | None:
        """When the open stretch that holds `at` began (None: closed now, or always open)."""
        if self.always:
            return None
        local, minute = self._local(at, tz)
        span = self._span_at(minute)
        if span is None:
            return None
        start = span[0]
        if start == 0 and self.spans[-1][1] == WEEK:  # Sunday's window runs on into Monday
            start = self.spans[-1][0] - WEEK
        return _wall(local, minute, start)

    def next_change(self, at: datetime, tz: ZoneInfo | None = None) -> datetime | None:
        """When the schedule next opens (closed now) or closes (open now); None: always open."""
        if self.always:
            return None
        local, minute = self._local(at, tz)
        edges = {edge % WEEK for span in self.spans for edge in span}
        if self.spans[0][0] == 0 and self.spans[-1][1] == WEEK:
            edges.discard(0)  # Sunday's window runs on into Monday: no change at midnight
        later = sorted(e for e in edges if e > minute)
        target = later[0] if later else min(edges) + WEEK
        return _wall(local, minute, target)

    def describe(self, at: datetime, tz: ZoneInfo | None = None) -> str:
        """Where the schedule stands at `at`, in words (pages, events, e-mails)."""
        if self.always:
            return "always open"
        change = self.next_change(at, tz)
        state = "open until" if self.is_open(at, tz) else "closed until"
        return f"{state} {change:%a %H:%M} ({_zone(tz).key})" if change else state


def _wall(local: datetime, minute: int, target: int) -> datetime:
    """The wall-clock time `target - minute` minutes from `local` (same zone, DST-aware)."""
    naive = local.replace(tzinfo=None) + timedelta(minutes=target - minute)
    return naive.replace(tzinfo=local.tzinfo)


ALWAYS = Schedule(text="", windows=())


def parse_schedule(text: str) -> Schedule:
    """Read a schedule, or raise ScheduleError with a message fit for a form field."""
    if not isinstance(text, str):
        raise ScheduleError(f"A schedule is text, {EXAMPLE}.")
    if not text.strip():
        return ALWAYS
    parts = [p.strip() for p in re.split(r"[;,]", text)]
    if any(not p for p in parts):
        raise ScheduleError(f"An empty window between separators; {EXAMPLE}.")
    if len(parts) > MAX_WINDOWS:
        raise ScheduleError(f"At most {MAX_WINDOWS} windows.")
    return Schedule(text=text.strip(), windows=tuple(_window(p) for p in parts))
