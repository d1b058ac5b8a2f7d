"""Serving schedules: the parser's windows and its messages, and the policy refusing what it cannot read."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from core.exceptions import DomainError
from quotas import tenants
from quotas.schedule import ScheduleError, parse_schedule

FRIDAY = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)  # a Friday


def at(day: int, hour: int, minute: int = 0) -> datetime:
    """December 2026: the 7th is a Monday."""
    return datetime(2026, 12, day, hour, minute, tzinfo=UTC)


class TestWindows:
    def test_weekdays_office_hours_open_and_close_at_the_minute(self):
        s = parse_schedule("mon-fri 08:00-20:00")
        assert not s.is_open(at(7, 7, 59)) and s.is_open(at(7, 8, 0))
        assert s.is_open(at(11, 19, 59)) and not s.is_open(at(11, 20, 0))
        assert not s.is_open(at(12, 12))  # Saturday
        assert s.opened_at(at(9, 15)) == at(9, 8)
        assert s.next_change(at(9, 15)) == at(9, 20)
        assert s.next_change(at(11, 21)) == at(14, 8)  # Friday night → Monday morning
        assert s.describe(at(12, 9)) == "closed until Mon 08:00 (UTC)"

    def test_several_windows_and_overnight_ones(self):
        s = parse_schedule("mon 08:00-12:00; wed 08:00-12:00, fri 22:00-02:00")
        assert s.is_open(at(7, 9)) and not s.is_open(at(8, 9)) and s.is_open(at(9, 9))
        assert s.is_open(at(11, 23)) and s.is_open(at(12, 1, 59)) and not s.is_open(at(12, 2))
        assert s.opened_at(at(12, 1)) == at(11, 22)

    def test_a_sunday_night_window_runs_into_monday_as_one_stretch(self):
        s = parse_schedule("sun 22:00-02:00; mon 02:00-04:00")
        assert s.is_open(at(7, 3))
        assert s.opened_at(at(7, 3)) == at(6, 22)
        assert s.next_change(at(7, 3)) == at(7, 4)

    def test_day_groups_full_names_and_wrapping_ranges(self):
        assert parse_schedule("weekends 10:00-14:00").is_open(at(13, 11))
        assert parse_schedule("Friday 10:00-14:00").is_open(at(11, 11))
        s = parse_schedule("fri-mon 10:00-14:00")
        assert [s.is_open(at(d, 11)) for d in range(7, 14)] == [True, False, False, False, True, True, True]

    def test_empty_and_whole_week_are_always_open(self):
        assert parse_schedule("").always and parse_schedule("  ").is_open(FRIDAY)
        full = parse_schedule("00:00-24:00")
        assert full.always and full.next_change(FRIDAY) is None and full.opened_at(FRIDAY) is None

    def test_wall_clock_times_are_in_the_given_zone(self):
        s = parse_schedule("mon-fri 08:00-20:00")
        berlin = ZoneInfo("Europe/Berlin")
        assert s.is_open(at(11, 18, 30), berlin) and not s.is_open(at(11, 19, 30), berlin)

    def test_the_portal_time_zone_is_the_default(self, settings):
        settings.TIME_ZONE = "America/New_York"
        assert not parse_schedule("mon-fri 08:00-20:00").is_open(at(7, 12, 59))  # 07:59 in New York


class TestMessages:
    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("mon,wed 08:00-12:00", "give the times too"),
            ("mo 08:00-10:00", "'mo' is not a day"),
            ("08:00-08:00", "the window is empty"),
            ("25:00-26:00", "25:00 is not a time of day"),
            ("mon 08:00-24:01", "24:01 is not a time of day"),
            ("mon 24:00-08:00", "24:00 is not a time of day"),
            ("mon-fri 8-20", "'8-20' is not a time range"),
            ("every day 08:00-20:00 now", "write a window as days and times"),
            ("mon 08:00-12:00;;", "An empty window"),
            ("; ".join(["mon 08:00-09:00"] * 29), "At most 28 windows"),
            ("mon 08:60-09:00", "08:60 is not a time of day"),
            ("mon\x0008:00-09:00", "is not a time range"),
        ],
    )
    def test_unreadable_schedules_say_where(self, text, message):
        with pytest.raises(ScheduleError, match=message):
            parse_schedule(text)

    def test_the_policy_refuses_an_unreadable_schedule_with_the_field(self, world):
        with pytest.raises(DomainError, match="'tu' is not a day") as caught:
            tenants.tenant_policy_set(
                tenant_id=world.alpha.pk,
                actor=world.users["platform_admin"],
                allowed_flavors=[],
                serving_schedule="tu 08:00-10:00",
            )
        assert caught.value.field == "serving_schedule"
        world.alpha.refresh_from_db()
        assert world.alpha.serving_schedule == ""

    def test_the_api_answers_400_and_the_form_shows_the_error(self, world):
        admin = world.client("platform_admin")
        base = {"auto_approve_max_gpus": 0, "max_gpus_per_deployment": 0, "allowed_flavors": []}
        url = "/api/v1/tenants/alpha/policy/"
        response = admin.put(url, {**base, "serving_schedule": "mon-fri 8-20"}, format="json")
        assert response.status_code == 400
        assert "is not a time range" in response.json()["serving_schedule"][0]
        ok = admin.put(url, {**base, "serving_schedule": "mon-fri 08:00-20:00"}, format="json")
        assert ok.status_code == 200 and ok.json()["serving_schedule"] == "mon-fri 08:00-20:00"
        page = world.browser("platform_admin").post(
            "/platform/tenants/alpha/",
            {
                "form": "policy",
                "policy-auto_approve_max_gpus": 0,
                "policy-max_gpus_per_deployment": 0,
                "policy-serving_schedule": "mon-fri 08:00-20:00; sat",
            },
        )
        assert page.status_code == 200 and "give the times too" in page.content.decode()
        world.alpha.refresh_from_db()
        assert world.alpha.serving_schedule == "mon-fri 08:00-20:00"
