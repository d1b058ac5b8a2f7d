"""Chargeback of a shared deployment (usage.chargeback): its cost split by tokens, day by day, the
owner keeping the rest; tenant totals after sharing add up to the ledger's cost exactly, and the
report, the page and both CSVs show the same figures to the tenants concerned only."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from access.models import KeyUsageDay
from access.services import key_mint
from deployments import services
from quotas.models import Membership, Tenant, TenantQuota
from sharing.models import Publication, Subscription
from tests.support.factories import draft
from usage.chargeback import charges, tenant_shares
from usage.models import UsageDay, UsageMonth
from usage.reports import parse_month

MONTH = parse_month(None)
DAY_COSTS = (Decimal("10.000001"), Decimal("7.500000"), Decimal("3.333333"))  # the third day: nobody called it


@pytest.fixture
def shared(world):
    gamma = Tenant.objects.create(slug="gamma", display_name="Gamma")
    TenantQuota.objects.create(tenant=gamma, flavor=world.h100, nominal_gpus=1)
    gamma_admin = User.objects.create_user("gamma-admin")
    Membership.objects.create(user=gamma_admin, tenant=gamma, role="tenant_admin")
    chat = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, name="chat"))
    publication = Publication.objects.create(deployment=chat, to_all=True)
    for consumer in (world.beta, gamma):
        Subscription.objects.create(publication=publication, consumer=consumer, state="active")
    keys = {
        "alpha": key_mint(user=world.users["tenant_admin"], tenant=world.alpha, name="alpha-key")[0],
        "beta": key_mint(user=world.users["platform_admin"], tenant=world.beta, name="beta-key")[0],
        "gamma": key_mint(user=gamma_admin, tenant=gamma, name="gamma-key")[0],
    }
    days = [MONTH + timedelta(days=i) for i in range(3)]
    for day, cost in zip(days, DAY_COSTS, strict=True):
        UsageDay.objects.create(deployment=chat, tenant=world.alpha, day=day, reserved_gpu_hours=1, cost=cost)
    UsageMonth.objects.create(
        deployment=chat, tenant=world.alpha, month=MONTH, reserved_gpu_hours=3, cost=sum(DAY_COSTS)
    )
    for key, day, prompt, completion in (
        ("alpha", 0, 100, 200),  # day 1: 1,000 tokens, beta 100, gamma 600
        ("beta", 0, 40, 60),
        ("gamma", 0, 100, 500),
        ("beta", 1, 20, 30),  # day 2: beta alone
    ):
        KeyUsageDay.objects.create(
            key=keys[key], tenant=world.alpha, deployment=chat, day=days[day], requests=1,
            prompt_tokens=prompt, completion_tokens=completion,
        )  # fmt: skip
    KeyUsageDay.objects.create(
        key=None, tenant=world.alpha, deployment=chat, day=days[2], requests=1
    )  # Try-it, no tokens
    return {"chat": chat, "gamma": gamma, "gamma_admin": gamma_admin}


def test_each_day_is_split_by_tokens_and_the_owner_keeps_the_rest(world, shared):
    found = {c.consumer: c for c in charges(MONTH)}
    # beta: 10.000001 × 100/1000 (1.000000, to six places, down) + 7.5 × 50/50 = 8.50
    # gamma: 10.000001 × 600/1000 = 6.000000 → 6.00; the idle third day stays alpha's
    assert {k: (c.tokens, c.share_tokens, c.cost) for k, c in found.items()} == {
        "beta": (150, 1050, Decimal("8.50")),
        "gamma": (600, 1050, Decimal("6.00")),
    }
    shares = tenant_shares(list(found.values()))
    assert shares[world.alpha.pk] == (Decimal(0), Decimal("14.50"))
    assert shares[world.beta.pk] == (Decimal("8.50"), Decimal(0))


def test_the_tenants_after_sharing_add_up_to_the_ledger_to_the_cent(world, shared):
    body = world.client("platform_admin").get("/api/v1/usage/", {"month": f"{MONTH:%Y-%m}"}).json()
    net = {t["tenant"]: Decimal(t["net_cost"]) for t in body["tenants"]}
    assert net == {"alpha": Decimal("6.33"), "beta": Decimal("8.50"), "gamma": Decimal("6.00")}
    ledger = sum(DAY_COSTS)  # 20.833334
    assert sum(net.values()) == ledger.quantize(Decimal("0.01"))
    owed = {t["tenant"]: (t["shared_owes"], t["shared_owed"]) for t in body["tenants"]}
    assert owed["alpha"] == ("0.00", "14.50")
    assert [(c["owner"], c["consumer"], c["cost"]) for c in body["shared"]] == [
        ("alpha", "beta", "8.50"),
        ("alpha", "gamma", "6.00"),
    ]


def test_a_consumer_sees_its_own_charge_and_keys_never_another_tenants(world, shared):
    body = world.client("other_member").get("/api/v1/usage/", {"month": f"{MONTH:%Y-%m}"}).json()
    assert [(c["consumer"], c["cost"]) for c in body["shared"]] == [("beta", "8.50")]
    assert [(k["key"], k["tenant"], k["owner"], k["prompt_tokens"]) for k in body["keys"]] == [
        ("beta-key", "beta", "alpha", 60)
    ]
    assert body["tenants"][0]["net_cost"] == "8.50"
    alpha = world.client("member").get("/api/v1/usage/", {"month": f"{MONTH:%Y-%m}"}).json()
    assert {k["key"] for k in alpha["keys"]} == {"alpha-key", "the portal's Try-it"}  # no beta or gamma key names


def test_both_csvs_hold_the_reports_rows(world, shared):
    def rows(kind):
        answer = world.client("platform_admin").get("/api/v1/usage/csv/", {"month": f"{MONTH:%Y-%m}", "rows": kind})
        assert answer["Content-Disposition"].endswith(f'-{kind}.csv"')
        return list(csv.DictReader(io.StringIO(b"".join(answer.streaming_content).decode())))

    shared_rows = rows("shared")
    assert [(r["consumer"], r["tokens"], r["cost"]) for r in shared_rows] == [
        ("beta", "150", "8.50"),
        ("gamma", "600", "6.00"),
    ]
    keys = {r["key"]: r for r in rows("keys")}
    assert (keys["gamma-key"]["tenant"], keys["gamma-key"]["owner"], keys["gamma-key"]["completion_tokens"]) == (
        "gamma",
        "alpha",
        "500",
    )
    page = world.browser("platform_admin").get("/usage/", {"month": f"{MONTH:%Y-%m}"}).content.decode()
    assert 'id="shared-usage"' in page and "$6.33" in page and "rows=shared" in page
    bad = world.client("platform_admin").get("/api/v1/usage/csv/", {"rows": "passwords"})
    assert bad.status_code == 400 and "rows" in bad.json()
