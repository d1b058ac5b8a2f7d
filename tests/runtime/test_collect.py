"""The scrape cycle end to end: a served exposition → derived samples → dashboard → advisor.

A local HTTP server serves the real vLLM series from ../shared/fixtures/metrics, one file per
scrape, as a deployment's metrics endpoint would.
"""

import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deployments.charts import dashboard
from deployments.models import MetricSample, Resolution, ScrapeState
from deployments.series import advice_for, downsample, series
from runtime.collect import collect_all
from runtime.metrics import derive, parse_exposition
from tests.deployments.factories import draft
from tests.shared import shared_path


class Exposition:
    """Serves the given texts in order (the last one repeats); a special 'garbage' mode."""

    def __init__(self, texts):
        self.texts, self.index, self.mode = list(texts), 0, "ok"
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                if outer.mode == "garbage":
                    body = b"<html>not metrics</html>"
                else:
                    body = outer.texts[min(outer.index, len(outer.texts) - 1)].encode()
                    outer.index += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"


@pytest.fixture
def series_files():
    folder = shared_path("fixtures", "metrics", "series-vllm-0.32-cpu")
    return sorted(folder.glob("*.prom"))


@pytest.fixture
def serving(world):
    from deployments import services

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"])
    dep.refresh_from_db()
    return dep


def make_ready(dep, url):
    type(dep).objects.filter(pk=dep.pk).update(state="ready", metrics_url=url)


class TestCollect:
    def test_samples_from_a_served_series_match_a_direct_computation(self, serving, series_files):
        texts = [f.read_text() for f in series_files[:6]]
        endpoint = Exposition(texts)
        make_ready(serving, endpoint.url)
        for _ in texts:
            collect_all()
        samples = list(MetricSample.objects.filter(deployment=serving).order_by("ts"))
        assert len(samples) == len(texts)
        # The first sample has gauges only; rates need two scrapes.
        assert samples[0].generation_tokens_per_s is None and samples[0].kv_cache_pct is not None
        # Scrape timestamps are ours, so compare counter deltas: tokens/s × interval = delta.
        snaps = [parse_exposition(t, timestamp=i * 2.0) for i, t in enumerate(texts)]
        for i in range(1, len(texts)):
            expected = derive(snaps[i - 1], snaps[i])
            got = samples[i]
            interval = (got.ts - samples[i - 1].ts).total_seconds()
            assert got.generation_tokens_per_s * interval == pytest.approx(
                expected.generation_tokens_per_s * 2.0, rel=0.05, abs=1e-6)
            assert got.kv_cache_pct == pytest.approx(expected.kv_cache_pct)
            assert got.waiting == expected.waiting and got.running == expected.running

    def test_a_garbage_endpoint_leaves_a_gap_and_an_error_not_a_number(self, serving, series_files):
        endpoint = Exposition([series_files[0].read_text()])
        make_ready(serving, endpoint.url)
        collect_all()
        endpoint.mode = "garbage"
        assert collect_all() == 0
        state = ScrapeState.objects.get(deployment=serving)
        assert state.last_error and MetricSample.objects.filter(deployment=serving).count() == 1

    def test_an_unreachable_endpoint_does_not_stop_the_others(self, world, serving, series_files):
        from deployments import services

        other = services.deployment_create(tenant=world.alpha, user=world.users["member"],
                                           data=draft(world, name="other", max_replicas=1))
        endpoint = Exposition([series_files[0].read_text()])
        make_ready(serving, "http://127.0.0.1:1/metrics")
        make_ready(other, endpoint.url)
        assert collect_all() == 1
        assert "127.0.0.1:1" not in (ScrapeState.objects.get(deployment=other).last_error or "")


class TestDashboardData:
    def test_series_feed_the_charts_and_downsampling_bounds_storage(self, serving):
        now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
        rows = [MetricSample(deployment=serving, resolution=Resolution.RAW, ts=now - timedelta(seconds=15 * i),
                             generation_tokens_per_s=float(i % 50), kv_cache_pct=40.0, waiting=0, running=1)
                for i in range(4 * 24 * 60 * 2)]  # two days of 15 s points
        MetricSample.objects.bulk_create(rows)
        data = series(serving, "1h", now=now)
        assert len(data["timestamps"]) == 241  # the window includes both ends
        figures = dashboard(data["timestamps"], data["series"])
        tokens = [trace for trace in figures["tokens"].data if "eneration" in (trace.name or "")][0]
        assert list(tokens.y) == data["series"]["generation_tokens_per_s"]
        before = MetricSample.objects.count()
        downsample(now=now)
        after = MetricSample.objects.filter(resolution=Resolution.RAW).count()
        assert after <= 4 * 60 * 24 + 1  # raw points older than a day are gone
        assert MetricSample.objects.filter(resolution=Resolution.MINUTE).count() == 2 * 24 * 60
        assert MetricSample.objects.count() < before
        day = series(serving, "24h", now=now)
        assert 1400 <= len(day["timestamps"]) <= 1441 and day["resolution_s"] == 60
        downsample(now=now)  # idempotent: nothing new to roll up
        assert MetricSample.objects.filter(resolution=Resolution.MINUTE).count() == 2 * 24 * 60


class TestAdvisorOnStoredSamples:
    def test_sustained_queue_advises_scale_out_with_quota_headroom(self, serving):
        now = datetime.now(UTC)
        MetricSample.objects.bulk_create([
            MetricSample(deployment=serving, ts=now - timedelta(seconds=15 * i), waiting=30, running=4,
                         kv_cache_pct=60, generation_tokens_per_s=100) for i in range(25)])
        advice = advice_for(serving, now=now)
        assert [a.code for a in advice] == ["scale_out"]
        assert advice[0].evidence["series"] == "waiting"

    def test_quiet_deployment_gets_no_advice(self, serving):
        now = datetime.now(UTC)
        MetricSample.objects.bulk_create([
            MetricSample(deployment=serving, ts=now - timedelta(seconds=15 * i), waiting=0, running=1,
                         kv_cache_pct=10, generation_tokens_per_s=50, ttft_p95=0.2) for i in range(25)])
        assert advice_for(serving, now=now) == []


class TestPrometheusSource:
    def test_a_kserve_deployment_gets_samples_through_prometheus(self, world, settings, series_files):
        """KServe pods sit behind Knative, so their vLLM metrics come from Prometheus."""
        import json
        from urllib.parse import parse_qs, urlparse

        from deployments import services
        from tests.runtime.test_metrics import prometheus_answer

        texts = [f.read_text() for f in series_files[:3]]
        state = {"i": 0}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                query = parse_qs(urlparse(self.path).query)["query"][0]
                answer = prometheus_answer(texts[min(state["i"], len(texts) - 1)], query)
                for item in answer["data"]["result"]:  # Prometheus stamps an instant query "now"
                    item["value"][0] = time.time()
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        settings.PROMETHEUS_URL = f"http://127.0.0.1:{httpd.server_port}"
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"],
                                         data=draft(world, backend="kserve", name="isvc"))
        type(dep).objects.filter(pk=dep.pk).update(state="ready")
        for i in range(3):
            state["i"] = i
            assert collect_all() == 1
        samples = list(MetricSample.objects.filter(deployment=dep).order_by("ts"))
        assert len(samples) == 3 and samples[-1].kv_cache_pct is not None
        httpd.shutdown()
