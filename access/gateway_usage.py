"""Usage per API key on the cluster (issue 34): Limitador's counters, labelled per key and model by
the portal's TelemetryPolicy (runtime.manifests.telemetry) and read through Prometheus
(runtime.exposition.limitador), counted into the same rows as the local gateway's log
(KeyUsageDay, access.key_usage).

Each read takes every counted series as it stands and counts what it grew by since the last read
(GatewaySeries keeps the last value per series; a value below it is a restarted Limitador, whose
whole value is new). What grew is the day's of the read: run every minute, a day's boundary moves
at most a minute's use. Tokens go to `unsplit_tokens` (the Gateway reports total tokens only);
requests let through and refused ones to `requests`, the refused also to `failed`.

A series counts only when its route and key agree with the database, by the same rule as the
local gateway's records (access.key_usage.trusted): the route is a deployment's own
(`<name>-<id>` in its tenant's namespace) or a tenant endpoint's (`llm-portal-v1…`, in the
namespace of the tenant whose model the `model` label names); the key is that tenant's, or a
tenant-wide key of a consumer subscribed to it. The labels are Limitador's, written from what the
portal rendered, but a label is still never trusted to name a row on its own.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from access.key_usage import trusted
from access.models import ApiKey, GatewaySeries, KeyUsageDay, UsageLogCursor
from deployments.models import ModelDeployment
from runtime.exposition.limitador import REFUSED, TOKENS, GatewayCounter, read_counters
from runtime.gateway_local.usage import UsageRecord
from runtime.manifests.tenant_route import ROUTE_NAME
from runtime.platform import gateway_spec

SOURCE = "gateway-metrics"
KEY = re.compile(r"key-([0-9]{1,18})")
TRY_IT = re.compile(r"portal-try-([0-9]{1,18})")
DEPLOYMENT_ROUTE = re.compile(r"[a-z0-9-]*-([0-9]{1,18})")
FORGET_AFTER = timedelta(days=7)  # a series not seen for this long is gone (its Limitador pod is)
QUERY_TIMEOUT_S = 10.0


def _deployments(counters: list[GatewayCounter]) -> dict[tuple[str, str, str], ModelDeployment]:
    """Each (route namespace, route name, model) → the deployment it counts for, where one does."""
    wanted = {(c.route_namespace, c.route_name, c.model) for c in counters}
    ids = {int(m.group(1)) for _, name, _ in wanted if (m := DEPLOYMENT_ROUTE.fullmatch(name))}
    slugs = {namespace for namespace, _, _ in wanted}  # a tenant's namespace is its slug
    found = ModelDeployment.objects.filter(Q(pk__in=ids) | Q(tenant__slug__in=slugs)).exclude(state="deleted")
    by_route, by_model = {}, {}
    for dep in found.select_related("tenant"):
        by_route[(dep.tenant.namespace, dep.resource_name)] = dep
        by_model[(dep.tenant.namespace, dep.served_model_name or dep.name)] = dep
    resolved = {}
    for namespace, name, model in wanted:
        dep = by_route.get((namespace, name))
        if dep is None and name.startswith(ROUTE_NAME):
            dep = by_model.get((namespace, model))
        if dep is not None:
            resolved[(namespace, name, model)] = dep
    return resolved


def _records(counters: list[GatewayCounter], grown: dict[str, int], at: float) -> list[tuple[UsageRecord, str, int]]:
    """What grew, as records the trust rule reads (one per series), with the series' kind and
    how much it grew."""
    deployments = _deployments(counters)
    key_ids = {int(m.group(1)) for c in counters if (m := KEY.fullmatch(c.key))}
    key_tenants = dict(ApiKey.objects.filter(pk__in=key_ids).values_list("pk", "tenant__slug"))
    records = []
    for counter in counters:
        dep = deployments.get((counter.route_namespace, counter.route_name, counter.model))
        amount = grown.get(counter.series, 0)
        if dep is None or amount <= 0:
            continue
        if match := KEY.fullmatch(counter.key):
            key_id, consumer = int(match.group(1)), key_tenants.get(int(match.group(1)), "")
        elif (match := TRY_IT.fullmatch(counter.key)) and int(match.group(1)) == dep.pk:
            key_id, consumer = None, dep.tenant.slug
        else:
            continue
        record = UsageRecord(
            ts=at,
            key_id=key_id,
            tenant=dep.tenant.slug,
            deployment_id=dep.pk,
            model=counter.model,
            prompt_tokens=0,
            completion_tokens=0,
            status=429 if counter.kind == REFUSED else 200,
            consumer="" if consumer == dep.tenant.slug else consumer,
        )
        records.append((record, counter.kind, amount))
    return records


def count_counters(counters: list[GatewayCounter], *, at: float) -> int:
    """Count what `counters` grew by since the last read; returns how many series counted."""
    day = timezone.localdate(datetime.fromtimestamp(at, tz=UTC))
    with transaction.atomic():
        UsageLogCursor.objects.get_or_create(source=SOURCE)
        cursor = UsageLogCursor.objects.select_for_update().get(source=SOURCE)  # one counter at a time
        seen = GatewaySeries.objects.filter(series__in=[c.series for c in counters])
        last = dict(seen.values_list("series", "value"))
        grown = {}
        for c in counters:
            before = last.get(c.series, 0.0)
            grown[c.series] = round(c.value - before if c.value >= before else c.value)
        found = _records(counters, grown, at)
        grew = {id(record): (kind, amount) for record, kind, amount in found}
        kept, tenants = trusted([record for record, _, _ in found])
        totals: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])  # requests, failed, tokens
        for record in kept:
            kind, amount = grew[id(record)]
            row = totals[(record.key_id, record.deployment_id)]
            row[2 if kind == TOKENS else 0] += amount
            row[1] += amount if kind == REFUSED else 0
        for (key_id, deployment_id), (requests, failed, tokens) in totals.items():
            KeyUsageDay.objects.get_or_create(
                key_id=key_id, deployment_id=deployment_id, day=day, defaults={"tenant_id": tenants[deployment_id]}
            )
            KeyUsageDay.objects.filter(key_id=key_id, deployment_id=deployment_id, day=day).update(
                requests=F("requests") + requests,
                failed=F("failed") + failed,
                unsplit_tokens=F("unsplit_tokens") + tokens,
            )
        when = datetime.fromtimestamp(at, tz=UTC)
        used = {key_id for (key_id, _), row in totals.items() if key_id is not None and any(row)}
        ApiKey.objects.filter(pk__in=used).filter(Q(last_used__isnull=True) | Q(last_used__lt=when)).update(
            last_used=when
        )
        for c in counters:
            GatewaySeries.objects.update_or_create(series=c.series, defaults={"value": c.value})
        GatewaySeries.objects.filter(updated__lt=timezone.now() - FORGET_AFTER).delete()
        cursor.position = at
        cursor.save(update_fields=["position", "updated"])
        return len(kept)


def count_gateway_metrics(at: float | None = None) -> int | None:
    """Read and count the Gateway's per-key counters (the beat task); None where there is no
    Gateway or no Prometheus to read them from."""
    if gateway_spec() is None or not settings.PROMETHEUS_URL:
        return None
    at = time.time() if at is None else at
    counters = read_counters(settings.PROMETHEUS_URL, at=at, timeout=QUERY_TIMEOUT_S)
    return count_counters(counters, at=at)
