"""The advisor's idle advice says what the tenant's idle policy will do (reclaim fills in the
note through metrics.advice's extension point)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from metrics.advice import advice_for
from tests.reclaim.support import points, serving

H = timedelta(hours=1)


def idle_advice(dep, now):
    return next(a for a in advice_for(dep, now=now) if a.code == "idle")


class TestIdleAdvice:
    def test_it_names_the_stop_when_the_tenant_has_an_idle_policy(self, world):
        now = timezone.now().replace(microsecond=0)
        dep = serving(world, since=now - 6 * H)
        points(dep, start=now - 6 * H, end=now)
        assert "idle policy" not in idle_advice(dep, now).message  # no policy: advice only

        world.alpha.idle_stop_hours = 8
        world.alpha.save(update_fields=["idle_stop_hours"])
        message = idle_advice(type(dep).objects.get(pk=dep.pk), now).message
        assert message.startswith("No request ran and no token was generated")
        assert "The tenant's idle policy will stop it in 2.0 h" in message
        assert f"({(now + 2 * H):%Y-%m-%d %H:%M} UTC)" in message

    def test_the_api_carries_the_same_words(self, world):
        now = timezone.now()
        dep = serving(world, since=now - 6 * H)
        points(dep, start=now - 6 * H, end=now)
        world.alpha.idle_warn_hours, world.alpha.idle_stop_hours = 1, 4
        world.alpha.save(update_fields=["idle_warn_hours", "idle_stop_hours"])
        body = world.client("viewer").get(f"/api/v1/deployments/{dep.pk}/advice/").json()
        idle = next(a for a in body if a["code"] == "idle")
        # Not warned yet (no sweep ran): the stop comes 3 h after the warning it still owes.
        assert "The tenant's idle policy will stop it in 3.0 h" in idle["message"]
