"""The usage report over HTTP: API, page and CSV show the same figures to the right people,
sorted and paged in SQL; bad parameters are a 400 with field messages (a form error on the page),
never a 500."""

from __future__ import annotations

import csv
import io
import re
from datetime import date
from decimal import Decimal

import pytest

from core.exports import csv_cell as _cell
from deployments.models import ModelDeployment
from usage.models import UsageMonth

NOV = date(2026, 11, 1)


def month_row(dep: ModelDeployment, month: date, **figures) -> UsageMonth:
    values = {
        "reserved_gpu_hours": Decimal("10"),
        "serving_gpu_hours": Decimal("5"),
        "prompt_tokens": 1000,
        "generation_tokens": 500,
        "cost": Decimal("39"),
    } | figures
    return UsageMonth.objects.create(deployment=dep, tenant=dep.tenant, month=month, **values)


def deployment(world, tenant, name: str, flavor=None) -> ModelDeployment:
    return ModelDeployment.objects.create(
        tenant=tenant, name=name, model_source="m", served_model_name=name, flavor=flavor or world.h100
    )


@pytest.fixture
def rows(world):
    """November 2026: alpha has chat (100 reserved, 80 serving, $390, 2M output tokens) and idle
    (40 reserved, never served, $156, no tokens); beta has one (unpriced, cost unknown)."""
    chat = deployment(world, world.alpha, "chat")
    idle = deployment(world, world.alpha, "idle")
    other = deployment(world, world.beta, "other", world.a100)
    month_row(
        chat,
        NOV,
        reserved_gpu_hours=Decimal("100"),
        serving_gpu_hours=Decimal("80"),
        generation_tokens=2_000_000,
        cost=Decimal("390"),
    )
    month_row(
        idle,
        NOV,
        reserved_gpu_hours=Decimal("40"),
        serving_gpu_hours=Decimal("0"),
        generation_tokens=0,
        cost=Decimal("156"),
        note="Never served this month.",
    )
    month_row(other, NOV, cost=None, unpriced_gpu_hours=Decimal("10"))
    month_row(chat, date(2026, 10, 1), reserved_gpu_hours=Decimal("1"))  # another month: not counted
    return chat, idle, other


class TestReportApi:
    def test_a_member_sees_their_tenant_with_hand_computed_totals(self, world, rows):
        body = world.client("member").get("/api/v1/usage/", {"month": "2026-11"}).json()
        assert [t["tenant"] for t in body["tenants"]] == ["alpha"]
        alpha = body["tenants"][0]
        assert (alpha["reserved_gpu_hours"], alpha["serving_gpu_hours"]) == ("140.000000", "80.000000")
        assert alpha["utilisation_pct"] == 57.1  # 80 / 140
        assert alpha["cost"] == "546.00"  # 390 + 156
        assert alpha["cost_per_mtok"] == "273.0000"  # 546 / 2M output tokens × 1M
        assert body["count"] == 2
        assert [r["deployment"] for r in body["results"]] == ["chat", "idle"]  # default: cost, high first
        assert body["results"][1]["note"] == "Never served this month."
        assert body["results"][1]["utilisation_pct"] == 0.0

    def test_platform_admins_see_every_tenant_and_an_unpriced_one_costs_unknown(self, world, rows):
        body = world.client("platform_admin").get("/api/v1/usage/", {"month": "2026-11"}).json()
        assert [t["tenant"] for t in body["tenants"]] == ["alpha", "beta"]
        assert body["tenants"][1]["cost"] is None
        assert body["count"] == 3

    def test_another_tenant_is_a_404_and_its_rows_never_show(self, world, rows):
        other = world.client("other_member")
        assert other.get("/api/v1/usage/", {"tenant": "alpha"}).status_code == 404
        body = other.get("/api/v1/usage/", {"month": "2026-11"}).json()
        assert {r["tenant"] for r in body["results"]} == {"beta"}

    @pytest.mark.parametrize(
        ("sort", "expected"),
        [
            ("-reserved", ["chat", "idle", "other"]),
            ("reserved", ["other", "idle", "chat"]),
            ("deployment", ["chat", "idle", "other"]),
            ("-utilisation", ["chat", "other", "idle"]),
            ("-cost", ["chat", "idle", "other"]),  # unknown cost last
            ("cost", ["idle", "chat", "other"]),  # unknown cost last either way
            ("cost_per_mtok", ["chat", "idle", "other"]),  # without tokens or cost: none, last
        ],
    )
    def test_sorting_is_done_in_sql_with_unknowns_last(self, world, rows, sort, expected):
        body = world.client("platform_admin").get("/api/v1/usage/", {"month": "2026-11", "sort": sort}).json()
        assert [r["deployment"] for r in body["results"]] == expected

    def test_paging(self, world, rows):
        client = world.client("platform_admin")
        body = client.get("/api/v1/usage/", {"month": "2026-11", "sort": "deployment", "limit": 2, "offset": 2}).json()
        assert (body["count"], [r["deployment"] for r in body["results"]]) == (3, ["other"])

    @pytest.mark.parametrize(
        ("params", "field"),
        [
            ({"month": "garbage"}, "month"),
            ({"month": "2026-13"}, "month"),
            ({"month": "0000-01"}, "month"),
            ({"month": "2026-1"}, "month"),
            ({"month": "2026-11-01T00:00"}, "month"),
            ({"month": "\uff12\uff10\uff12\uff16-11"}, "month"),  # full-width digits
            ({"sort": "garbage"}, "sort"),
            ({"sort": "cost; drop table"}, "sort"),
            ({"limit": "0"}, "limit"),
            ({"limit": "abc"}, "limit"),
            ({"limit": "99999999999999999999"}, "limit"),
            ({"offset": "-1"}, "offset"),
            ({"tenant": "<script>"}, "tenant"),
            ({"tenant": "al\x00pha"}, "tenant"),
            ({"tenant": "a" * 500}, "tenant"),
        ],
    )
    def test_bad_parameters_are_a_400_with_the_field_everywhere(self, world, rows, params, field):
        client = world.client("member")
        for path in ("/api/v1/usage/", "/api/v1/usage/csv/", "/api/v1/usage/budgets/"):
            response = client.get(path, params)
            assert response.status_code == 400, (path, params, response.content[:200])
            assert field in response.json(), (path, response.json())
        page = world.browser("member").get("/usage/", params)
        assert page.status_code == 400
        assert b'class="error"' in page.content
        assert world.browser("member").get("/usage/export.csv", params).status_code == 400

    def test_budgets_endpoint(self, world, rows):
        world.alpha.monthly_budget = Decimal("600")
        world.alpha.save()
        body = world.client("member").get("/api/v1/usage/budgets/", {"month": "2026-11"}).json()
        assert body == [
            {
                "monthly_budget": "600.00",
                "spent": "546.00",
                "pct": 91.0,
                "level": 80,
                "hard_stop": False,
                "stopped_at": None,
                "banner": "Team Alpha has used 91 % of its monthly budget (546.00 of 600.00).",
                "tenant": "alpha",
                "month": "2026-11",
            }
        ]


class TestCsv:
    def test_the_csv_has_the_reports_rows_and_figures(self, world, rows):
        response = world.client("member").get("/api/v1/usage/csv/", {"month": "2026-11", "sort": "deployment"})
        assert response.status_code == 200
        assert response["Content-Type"] == "text/csv"
        assert 'filename="usage-2026-11.csv"' in response["Content-Disposition"]
        table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
        assert [(r["deployment"], r["reserved_gpu_hours"], r["cost"]) for r in table] == [
            ("chat", "100.000000", "390.000000"),
            ("idle", "40.000000", "156.000000"),
        ]
        assert table[0]["month"] == "2026-11" and table[1]["note"] == "Never served this month."

    def test_the_page_download_is_the_same_file(self, world, rows):
        api = world.client("member").get("/api/v1/usage/csv/", {"month": "2026-11"})
        page = world.browser("member").get("/usage/export.csv", {"month": "2026-11"})
        assert b"".join(page.streaming_content) == b"".join(api.streaming_content)

    def test_cells_a_spreadsheet_would_run_as_formulas_are_quoted(self):
        assert [_cell(v) for v in ("=1+1", "+x", "-2", "@sum", "chat", None, Decimal("1.5"))] == [
            "'=1+1",
            "'+x",
            "'-2",
            "'@sum",
            "chat",
            "",
            "1.5",
        ]


class TestPage:
    def test_a_member_sees_reserved_and_serving_labelled_and_only_their_tenant(self, world, rows):
        page = world.browser("member").get("/usage/", {"month": "2026-11"})
        text = page.content.decode()
        assert page.status_code == 200
        assert "Reserved GPU-h" in text and "Serving GPU-h" in text and "Never served this month." in text
        assert "Team Alpha" in text and "Team Beta" not in text
        assert "$546.00" in text

    def test_platform_admins_see_every_tenant_and_unknown_cost(self, world, rows):
        text = world.browser("platform_admin").get("/usage/", {"month": "2026-11"}).content.decode()
        assert "Team Alpha" in text and "Team Beta" in text and "unknown" in text

    def test_the_sort_menu_and_the_states_are_in_words(self, world, rows):
        """Issue 32: the menu says "$ / 1M tokens (low first)", not "cost_per_mtok (low first)", from
        the same labels as the table's headings (each row says whether its tokens are output or, for
        embedding and score, input); a deployment's state is its label."""
        text = world.browser("member").get("/usage/", {"month": "2026-11", "sort": "cost_per_mtok"}).content.decode()
        menu = re.search(r'<select name="sort" id="id_sort">(.*?)</select>', text, re.S).group(1)
        options = re.findall(r'<option value="([^"]*)" ?(selected)?>([^<]*)</option>', menu)
        assert options[:2] == [("-tenant", "", "Tenant (high first)"), ("tenant", "", "Tenant (low first)")]
        assert ("cost_per_mtok", "selected", "$ / 1M tokens (low first)") in options
        assert len(options) == 16 and not [label for *_, label in options if "_" in label]
        assert "h100-sxm5 · Pending approval" in text and "· pending_approval" not in text

    def test_another_tenant_is_a_404_and_anonymous_signs_in(self, world, rows):
        assert world.browser("other_member").get("/usage/", {"tenant": "alpha"}).status_code == 404
        assert world.browser("anonymous").get("/usage/").status_code == 302


class TestCsvNegotiation:
    def test_a_client_asking_for_text_csv_gets_the_file_and_csv_errors(self, world, rows):
        client = world.client("member")
        ok = client.get("/api/v1/usage/csv/", {"month": "2026-11"}, HTTP_ACCEPT="text/csv")
        assert ok.status_code == 200 and b"".join(ok.streaming_content).startswith(b"month,tenant,deployment")
        bad = client.get("/api/v1/usage/csv/", {"month": "nope"}, HTTP_ACCEPT="text/csv")
        assert bad.status_code == 400
        assert bad.content.decode().splitlines() == [
            "field,message",
            'month,"Give the month as YYYY-MM, e.g. 2026-11."',
        ]


PAGE_ROLES = {"anonymous": 302, "viewer": 200, "member": 200, "tenant_admin": 200, "platform_admin": 200}


@pytest.mark.parametrize("path", ["/usage/", "/usage/export.csv"])
def test_pages_per_role_for_alphas_report(world, rows, path):
    """The browser side of the permission matrix: alpha's report for each role (another tenant's
    member gets a 404, as in the API)."""
    got = {
        role: world.browser(role).get(path, {"tenant": "alpha"}).status_code for role in (*PAGE_ROLES, "other_member")
    }
    assert got == {**PAGE_ROLES, "other_member": 404}
