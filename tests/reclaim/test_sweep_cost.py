"""What the reclaim sweeps cost over a fleet: 200 serving deployments with 6 h of points each.
Prints the seconds per sweep (the figures in the report come from here); asserts the outcomes.

    scripts/test -m slow tests/reclaim/test_sweep_cost.py -s
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from quotas.models import TenantQuota
from reclaim.idle import idle_sweep
from reclaim.schedules import schedule_sweep
from tests.reclaim.support import points, serving

pytestmark = pytest.mark.slow
FLEET = 200


def timed(label: str, sweep, **kw) -> dict:
    start = time.perf_counter()
    result = sweep(**kw)
    print(f"{label}: {result} in {time.perf_counter() - start:.2f} s ({FLEET} deployments)")
    return result


def test_sweeps_over_a_fleet(world):
    now = timezone.now()
    TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(nominal_gpus=FLEET)
    deps = [serving(world, name=f"d{i}", since=now - timedelta(hours=30), max_replicas=1) for i in range(FLEET)]
    for dep in deps:
        points(dep, start=now - timedelta(hours=6), end=now)
    world.alpha.idle_warn_hours, world.alpha.idle_stop_hours = 6, 8
    world.alpha.serving_schedule = "mon-fri 08:00-20:00"
    world.alpha.save()
    assert timed("idle sweep, all warned", idle_sweep, now=now)["warn"] == FLEET
    assert timed("idle sweep, nothing to do", idle_sweep, now=now)["none"] == FLEET
    saturday, monday = datetime(2026, 12, 5, 12, tzinfo=UTC), datetime(2026, 12, 7, 12, tzinfo=UTC)
    assert timed("schedule sweep, all stopped", schedule_sweep, now=saturday)["stopped"] == FLEET
    assert timed("schedule sweep, all started", schedule_sweep, now=monday)["started"] == FLEET
    assert timed("schedule sweep, nothing to do", schedule_sweep, now=monday) == {
        "stopped": 0,
        "started": 0,
        "failed": 0,
    }
