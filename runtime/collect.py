"""The scrape cycle: every serving deployment's metrics, concurrently, into derived samples.

Source: the deployment's own endpoint (Ray metrics port / vLLM /metrics), or Prometheus when
PROMETHEUS_URL is set. A failing endpoint leaves a gap and a recorded error for that
deployment only; it never stops the cycle or produces a number from a partial read.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.utils import timezone

from deployments.choices import State
from deployments.models import ModelDeployment, ScrapeState
from deployments.series import store_point
from portal.observability import SCRAPE_FAILURES
from runtime.metrics import ScrapeError, Snapshot, derive, query_prometheus, scrape_many

log = logging.getLogger(__name__)
SCRAPED_STATES = (State.READY, State.DEGRADED, State.PROVISIONING)


def _prometheus_many(deps: list[ModelDeployment]) -> dict[int, Snapshot | ScrapeError]:
    def one(dep):
        try:
            return dep.pk, query_prometheus(settings.PROMETHEUS_URL, {"namespace": dep.tenant.namespace,
                                                                      "model_name": dep.served_model_name},
                                            timeout=settings.METRICS_SCRAPE_TIMEOUT_SECONDS)
        except ScrapeError as error:
            return dep.pk, error

    with ThreadPoolExecutor(max_workers=16) as pool:
        return dict(pool.map(one, deps))


def collect_all() -> int:
    """Scrape, derive and store one point per reachable deployment; returns points stored."""
    deps = ModelDeployment.objects.filter(state__in=SCRAPED_STATES).select_related("tenant")
    if not settings.PROMETHEUS_URL:
        deps = deps.exclude(metrics_url="")  # without Prometheus only direct endpoints can be read
    deps = list(deps)
    if not deps:
        return 0
    if settings.PROMETHEUS_URL:
        results = _prometheus_many(deps)
    else:
        results = scrape_many({d.pk: d.metrics_url for d in deps}, timeout=settings.METRICS_SCRAPE_TIMEOUT_SECONDS)
    stored = 0
    now = timezone.now()
    states = {s.deployment_id: s for s in ScrapeState.objects.filter(deployment_id__in=[d.pk for d in deps])}
    for dep in deps:
        state = states.get(dep.pk) or ScrapeState(deployment=dep)
        state.last_attempt = now
        result = results.get(dep.pk)
        if isinstance(result, Snapshot):
            prev = Snapshot.from_dict(state.snapshot) if state.snapshot else None
            if prev is None or result.timestamp > prev.timestamp:
                # Without a previous snapshot only gauges are known; rates start next cycle.
                store_point(dep.pk, derive(prev, result))
                stored += 1
            state.snapshot, state.last_success, state.last_error = result.to_dict(), now, ""
        else:
            state.last_error = str(result or "no result")[:1000]
            SCRAPE_FAILURES.inc()
            log.info("metrics scrape of deployment %s failed: %s", dep.pk, state.last_error)
        state.save()
    return stored
