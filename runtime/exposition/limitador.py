"""Limitador's counters as Prometheus holds them, labelled per key by the portal's TelemetryPolicy
(runtime.manifests.telemetry says what each series counts). One instant query per read, whatever
the number of keys; the values are the counters as they stand, and access.gateway_usage turns
them into increases. Pure but for the one HTTP call.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from runtime.exposition.parse import ScrapeError
from runtime.exposition.promql import instant_query
from runtime.manifests.telemetry import (
    HITS,
    KEY_LABEL,
    LIMITED,
    MODEL_LABEL,
    NAMESPACE_LABEL,
    SERVED_LABEL,
    series_selector,
)

TOKENS = "tokens"  # hits a TokenRateLimitPolicy reported: the responses' total tokens
REQUESTS = "requests"  # hits a RateLimitPolicy let through: one per request
REFUSED = "refused"  # checks that answered 429


@dataclass(frozen=True)
class GatewayCounter:
    """One counter series: what it counts (`kind`), whose it is, and its value now."""

    series: str  # a digest of the series' whole label set: the same series on every read
    kind: str
    route_namespace: str
    route_name: str
    key: str
    model: str
    value: float


def _kind(metric: dict[str, str]) -> str:
    if metric.get("__name__") in LIMITED:
        return REFUSED
    return TOKENS if metric.get(SERVED_LABEL) else REQUESTS


def _series(metric: dict[str, str]) -> str:
    """Which series this is: every label (the instance and pod included: each Limitador replica
    counts on its own, and each restart starts again at 0)."""
    return hashlib.sha256(json.dumps(sorted(metric.items())).encode()).hexdigest()


def counter_of(metric: dict[str, str], raw: str) -> GatewayCounter | None:
    """One series of the answer, or None where it is not one the portal counts (a name or a
    route namespace that is not Limitador's, a value that is not a number)."""
    if metric.get("__name__") not in HITS + LIMITED or not metric.get(KEY_LABEL):
        return None
    namespace, _, route = (metric.get(NAMESPACE_LABEL) or "").partition("/")
    try:
        value = float(raw)
    except ValueError:
        return None
    if not namespace or not route or math.isnan(value) or math.isinf(value) or value < 0:
        return None
    return GatewayCounter(
        series=_series(metric),
        kind=_kind(metric),
        route_namespace=namespace,
        route_name=route,
        key=metric[KEY_LABEL],
        model=metric.get(MODEL_LABEL, ""),
        value=value,
    )


def read_counters(base_url: str, *, at: float, timeout: float) -> list[GatewayCounter]:
    """Every counted series at unix time `at`; ScrapeError when Prometheus does not answer."""
    found = []
    for item in instant_query(base_url, series_selector(), at=at, timeout=timeout):
        try:
            counter = counter_of(dict(item["metric"]), item["value"][1])
        except (KeyError, IndexError, TypeError) as exc:
            raise ScrapeError(f"{base_url}: not a Prometheus sample: {exc}") from exc
        if counter is not None:
            found.append(counter)
    return found
