"""The audit export (portal.audit_api): JSON lines and CSV for platform admins, a validated date
range, streamed; and in the OpenAPI schema."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime

import pytest

from core.models import RECORD_FIELDS, AuditEvent, audit

JSONL = "/api/v1/audit/export/jsonl/"
CSV = "/api/v1/audit/export/csv/"


@pytest.fixture
def dated(world):
    """Three rows on 1, 2 and 3 March 2026 (noon UTC)."""
    rows = []
    for day in (1, 2, 3):
        event = audit(
            actor=world.users["tenant_admin"],
            action="test.event",
            obj=world.alpha,
            tenant=world.alpha,
            reason='=HYPERLINK("http://evil")' if day == 2 else f"day {day}",
            changes={"day": day},
        )
        AuditEvent.objects.filter(pk=event.pk).update(created=datetime(2026, 3, day, 12, tzinfo=UTC))
        rows.append(event.pk)
    return rows


def _body(response) -> str:
    assert response.streaming, "the export is streamed, not built in memory"
    return b"".join(response.streaming_content).decode()


def _lines(response) -> list[dict]:
    return [json.loads(line) for line in _body(response).splitlines()]


class TestJsonLines:
    def test_every_row_in_the_range_oldest_first(self, world, dated):
        response = world.client("platform_admin").get(JSONL, {"since": "2026-03-02", "until": "2026-03-03T12:00:00Z"})
        assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
        assert response["Content-Disposition"] == 'attachment; filename="audit.jsonl"'
        [row] = _lines(response)  # until is exclusive: the 3 March row is out
        assert row == {
            "id": dated[1],
            "created": "2026-03-02T12:00:00+00:00",
            "actor": "alpha-tenant_admin",
            "actor_name": "alpha-tenant_admin",
            "action": "test.event",
            "tenant": "alpha",
            "object_type": "quotas.tenant",
            "object_id": str(world.alpha.pk),
            "reason": '=HYPERLINK("http://evil")',
            "changes": {"day": 2},
            "ip_address": None,
            "user_agent": "",
        }

    def test_without_a_range_everything_in_order(self, world, dated):
        rows = _lines(world.client("platform_admin").get(JSONL))
        assert [r["id"] for r in rows if r["action"] == "test.event"] == dated
        assert [r["created"] for r in rows] == sorted(r["created"] for r in rows)

    def test_an_offset_is_honoured(self, world, dated):
        rows = _lines(world.client("platform_admin").get(JSONL, {"since": "2026-03-02T13:00:00+02:00"}))
        assert [r["id"] for r in rows] == dated[1:]  # 11:00 UTC on the 2nd


class TestCsv:
    def test_header_first_changes_as_json_and_formulas_defused(self, world, dated):
        response = world.client("platform_admin").get(CSV, {"since": "2026-03-02", "until": "2026-03-03"})
        assert response.status_code == 200 and response["Content-Type"] == "text/csv"
        header, row = list(csv.reader(io.StringIO(_body(response))))
        assert tuple(header) == RECORD_FIELDS
        record = dict(zip(header, row, strict=True))
        assert record["reason"] == '\'=HYPERLINK("http://evil")'
        assert json.loads(record["changes"]) == {"day": 2} and record["tenant"] == "alpha"


class TestRefusals:
    @pytest.mark.parametrize("path", [JSONL, CSV])
    @pytest.mark.parametrize(
        ("query", "field"),
        [
            ({"since": "yesterday"}, "since"),
            ({"until": "2026-13-01"}, "until"),
            ({"since": "2026-03-03", "until": "2026-03-01"}, "until"),
            ({"until": "9999-12-31T23:59:59-01:00"}, "until"),  # past the largest datetime in UTC
            ({"since": "\x00"}, "since"),
            ({"since": "2026-03-01" + "0" * 5000}, "since"),
        ],
    )
    def test_a_bad_range_is_a_400_naming_the_parameter(self, world, dated, path, query, field):
        response = world.client("platform_admin").get(path, query)
        assert response.status_code == 400
        assert response["Content-Type"] == "application/json" and response.json()[field]

    @pytest.mark.parametrize("path", [JSONL, CSV])
    def test_only_platform_admins_export(self, world, dated, path):
        for role in ("viewer", "member", "tenant_admin", "other_member"):
            response = world.client(role).get(path)
            assert response.status_code == 403 and "test.event" not in response.content.decode()
        assert world.client("anonymous").get(path).status_code == 401


def test_the_exports_are_in_the_openapi_schema(world):
    schema = world.client("platform_admin").get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    for path, media in ((JSONL, "application/x-ndjson"), (CSV, "text/csv")):
        operation = schema["paths"][path]["get"]
        assert media in operation["responses"]["200"]["content"]
        assert {"since", "until"} <= {p["name"] for p in operation["parameters"]}
        assert "400" in operation["responses"] and "403" in operation["responses"]
