"""Usage per API key from the local gateway's log (access.key_usage): counted once into a row per
key, deployment and day, whatever the number of runs or workers; `last_used` moves; records that
disagree with the database (a deployment of another tenant, another tenant's key, a key scoped to
another deployment, an unknown deployment) are not counted; the key page and the API show the
month's figures."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.utils import timezone

from access.key_usage import count_gateway_log, count_usage, gateway_log
from access.models import ApiKey, KeyUsageDay, UsageLogCursor
from access.services import key_mint
from deployments import services
from runtime.gateway_local.usage import UsageLog, UsageRecord
from tests.support.factories import draft

NOW = time.time()


def deploy(world, tenant, name):
    user = world.users["member" if tenant == world.alpha else "other_member"]
    return services.deployment_create(tenant=tenant, user=user, data=draft(world, name=name))


def mint(world, tenant, deployment=None) -> ApiKey:
    role = "tenant_admin" if tenant == world.alpha else "platform_admin"
    key, _ = key_mint(user=world.users[role], tenant=tenant, name="k", deployment_id=deployment and deployment.pk)
    return key


@pytest.fixture
def keyed(world):
    chat, embed = deploy(world, world.alpha, "chat"), deploy(world, world.alpha, "embed")
    other = deploy(world, world.beta, "beta-chat")
    wide, scoped, foreign = mint(world, world.alpha), mint(world, world.alpha, chat), mint(world, world.beta)
    return {"chat": chat, "embed": embed, "other": other, "wide": wide, "scoped": scoped, "foreign": foreign}


def record(ts, key, dep, prompt=3, completion=5, status=200, tenant="alpha"):
    key_id = key.pk if key is not None else None
    return UsageRecord(ts, key_id, tenant, dep.pk, dep.served_model_name, prompt, completion, status)


def rows():
    found = KeyUsageDay.objects.order_by("key_id", "deployment_id").values_list(
        "key_id", "deployment_id", "requests", "failed", "prompt_tokens", "completion_tokens"
    )
    return list(found)


def test_requests_and_tokens_are_counted_per_key_and_deployment_once(world, keyed):
    k = keyed
    log = [
        record(NOW - 30, k["wide"], k["chat"]),
        record(NOW - 20, k["wide"], k["chat"], prompt=10, completion=0, status=429),
        record(NOW - 10, k["wide"], k["embed"], prompt=7, completion=0),
        record(NOW - 5, k["scoped"], k["chat"], prompt=2, completion=4),
        record(NOW - 1, None, k["chat"], prompt=1, completion=1),  # the portal's Try-it key
    ]
    assert count_usage(log) == 5
    assert count_usage(log) == 0  # the same log again: nothing new
    expected = [
        (k["wide"].pk, k["chat"].pk, 2, 1, 13, 5),
        (k["wide"].pk, k["embed"].pk, 1, 0, 7, 0),
        (k["scoped"].pk, k["chat"].pk, 1, 0, 2, 4),
        (None, k["chat"].pk, 1, 0, 1, 1),
    ]
    assert sorted(rows(), key=str) == sorted(expected, key=str)
    assert ApiKey.objects.get(pk=k["wide"].pk).last_used == datetime.fromtimestamp(NOW - 10, tz=UTC)
    assert ApiKey.objects.get(pk=k["foreign"].pk).last_used is None
    # A later record adds to its row.
    assert count_usage([*log, record(NOW, k["scoped"], k["chat"], prompt=1, completion=1)]) == 1
    assert KeyUsageDay.objects.get(key=k["scoped"]).requests == 2
    assert KeyUsageDay.objects.get(key=k["scoped"]).day == timezone.localdate()


def test_records_that_disagree_with_the_database_are_not_counted(world, keyed):
    k = keyed
    log = [
        record(NOW - 5, k["wide"], k["other"]),  # alpha's key on beta's deployment, named as alpha's
        record(NOW - 4, k["wide"], k["other"], tenant="beta"),  # alpha's key, beta's deployment
        record(NOW - 3, k["foreign"], k["chat"]),  # beta's key on alpha's deployment
        record(NOW - 2, k["scoped"], k["embed"]),  # a key scoped to chat, on embed
        UsageRecord(NOW - 1, k["wide"].pk, "alpha", 10**9, "gone", 1, 1, 200),  # no such deployment
    ]
    assert count_usage(log) == 0
    assert rows() == [] and not ApiKey.objects.filter(last_used__isnull=False).exists()
    assert UsageLogCursor.objects.get().position == NOW - 1  # read, and not read again


def test_the_log_the_gateway_writes_is_read_from_the_runtime_dir(world, keyed, settings, tmp_path):
    settings.LOCAL_RUNTIME_DIR = tmp_path
    log = UsageLog(gateway_log())
    for n in range(3):
        log.append(record(NOW + n, keyed["wide"], keyed["chat"], prompt=n, completion=1))
    assert count_gateway_log() == 3
    assert rows() == [(keyed["wide"].pk, keyed["chat"].pk, 3, 0, 3, 3)]


def test_lines_of_the_wrong_shape_are_skipped_and_the_rest_counted(world, keyed, settings, tmp_path):
    settings.LOCAL_RUNTIME_DIR = tmp_path
    path = gateway_log()
    good = record(NOW, keyed["wide"], keyed["chat"])
    UsageLog(path).append(good)
    bad = [
        {"ts": "soon"},
        {**good.__dict__, "ts": "1"},
        {**good.__dict__, "prompt_tokens": -5},
        {**good.__dict__, "deployment_id": "1"},
        {**good.__dict__, "key_id": True},
        {**good.__dict__, "status": None},
    ]
    with path.open("a") as log:
        log.write("".join(json.dumps(line) + "\n" for line in bad) + "not json\n")
    assert count_gateway_log() == 1
    assert rows() == [(keyed["wide"].pk, keyed["chat"].pk, 1, 0, 3, 5)]


def test_no_log_counts_nothing(world, settings, tmp_path):
    settings.LOCAL_RUNTIME_DIR = tmp_path
    assert count_gateway_log() == 0 and not KeyUsageDay.objects.exists()


def test_the_key_page_and_the_api_show_this_months_figures(world, keyed):
    count_usage([record(NOW - 2, keyed["wide"], keyed["chat"], prompt=40, completion=2)])
    page = world.browser("member").get("/keys/").content.decode()
    body = world.client("member").get("/api/v1/keys/").json()
    listed = {row["id"]: row for row in body["results"]} if isinstance(body, dict) else {r["id"]: r for r in body}
    assert "1 request · 40 in / 2 out tokens this month" in page
    wide, scoped = listed[keyed["wide"].pk], listed[keyed["scoped"].pk]
    assert (wide["month_requests"], wide["month_prompt_tokens"], wide["month_completion_tokens"]) == (1, 40, 2)
    assert (scoped["month_requests"], scoped["last_used"]) == (0, None)


@pytest.mark.django_db(transaction=True)
def test_two_workers_counting_the_same_log_count_it_once(tx_world):
    world = tx_world
    chat = deploy(world, world.alpha, "chat")
    key = mint(world, world.alpha)
    log = [record(NOW - 100 + n, key, chat, prompt=1, completion=1) for n in range(50)]
    barrier, counted = threading.Barrier(2), []

    def work():
        try:
            barrier.wait()
            counted.append(count_usage(log))
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(counted) == [0, 50]
    assert rows() == [(key.pk, chat.pk, 50, 0, 50, 50)]


def test_the_usage_report_lists_the_month_per_key_to_whom_may_see_it(world, keyed):
    k = keyed
    count_usage(
        [
            record(NOW - 4, k["wide"], k["chat"], prompt=10, completion=20),
            record(NOW - 3, k["wide"], k["chat"], prompt=1, completion=1, status=500),
            record(NOW - 2, None, k["embed"], prompt=3, completion=0),
            record(NOW - 1, k["foreign"], k["other"], prompt=100, completion=100, tenant="beta"),
        ]
    )
    body = world.client("member").get("/api/v1/usage/").json()
    page = world.browser("member").get("/usage/").content.decode()
    admin = world.client("platform_admin").get("/api/v1/usage/").json()
    fields = ("key", "deployment", "requests", "failed", "prompt_tokens", "completion_tokens")
    listed = [tuple(row[f] for f in fields) for row in body["keys"]]
    assert listed == [("k", "chat", 2, 1, 11, 21), ("the portal's Try-it", "embed", 1, 0, 3, 0)]
    assert body["keys"][0]["key_id"] == k["wide"].pk and body["keys"][1]["key_id"] is None
    assert 'id="key-usage"' in page and "beta-chat" not in page
    assert [r["tenant"] for r in admin["keys"]] == ["beta", "alpha", "alpha"]
    last_month = world.client("member").get("/api/v1/usage/", {"month": "2020-01"}).json()
    assert last_month["keys"] == []


def test_a_consumers_use_of_a_shared_model_counts_only_with_a_subscription_and_a_tenant_wide_key(world, keyed):
    from sharing.models import Publication, Subscription

    k = keyed
    beta_scoped = mint(world, world.beta, k["other"])

    def shared(ts, key):
        return UsageRecord(ts, key.pk, "alpha", k["chat"].pk, "chat", 2, 4, 200, consumer="beta")

    assert count_usage([shared(NOW, k["foreign"])]) == 0  # no subscription: not counted
    publication = Publication.objects.create(deployment=k["chat"], to_all=True)
    Subscription.objects.create(publication=publication, consumer=world.beta, state="active")
    counted = count_usage([shared(NOW + 1, k["foreign"]), shared(NOW + 2, beta_scoped), shared(NOW + 3, k["wide"])])
    assert counted == 1  # beta's tenant-wide key only: not beta's scoped key, not alpha's key named as beta's
    assert rows() == [(k["foreign"].pk, k["chat"].pk, 1, 0, 2, 4)]
    assert KeyUsageDay.objects.get().tenant == world.alpha  # the deployment's owner; the key says who consumed
