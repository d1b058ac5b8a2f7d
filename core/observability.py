"""The portal's own Prometheus metrics: HTTP requests, task durations, reconcile outcomes,
scrape failures. Served on /metrics behind a bearer token (METRICS_TOKEN); without a token the
endpoint is off. With several gunicorn workers set PROMETHEUS_MULTIPROC_DIR so the numbers add up.
"""

from __future__ import annotations

import hmac
import os
import time

from django.conf import settings
from django.http import HttpResponse, HttpResponseNotFound
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

HTTP_REQUESTS = Counter("portal_http_requests_total", "HTTP requests served", ["method", "status"])
HTTP_LATENCY = Histogram("portal_http_request_seconds", "HTTP request latency", ["method"])
TASK_SECONDS = Histogram("portal_task_seconds", "Celery task run time", ["task", "outcome"])
RECONCILES = Counter("portal_reconcile_total", "Reconcile outcomes", ["backend", "result"])
SCRAPE_FAILURES = Counter("portal_metrics_scrape_failures_total", "Failed deployment metric scrapes")


class MetricsMiddleware:
    """Counts requests by method and status class (no paths: they carry ids)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        HTTP_LATENCY.labels(request.method).observe(time.perf_counter() - started)
        HTTP_REQUESTS.labels(request.method, f"{response.status_code // 100}xx").inc()
        return response


def metrics_view(request):
    token = settings.METRICS_TOKEN
    if not token:
        return HttpResponseNotFound()
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), token.encode()):
        return HttpResponse(status=401)
    registry = None
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    body = generate_latest(registry) if registry else generate_latest()
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
