"""runtime.exposition against the real vLLM / Ray Serve LLM expositions in ../shared.

Expected values are either written out (read from the files by eye, stated in the test) or
recomputed here with plain string operations on the file text, never with the code under
test, so a parser bug cannot agree with itself.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runtime.exposition.derive import MetricPoint, derive, histogram_quantile
from runtime.exposition.parse import RAY_CONTEXT_LABELS, ScrapeError, filter_exposition, parse_exposition
from runtime.exposition.promql import QUERY_COUNT, fleet_points
from runtime.exposition.snapshot import COUNTERS, GAUGES, HISTOGRAMS, SERVE_GAUGES, Snapshot
from runtime.exposition.sources import scrape, scrape_many
from runtime.exposition.window import rescaled
from tests.support.shared import shared_path

VLLM_BUSY = "vllm-0.32-cpu-openai-server-under-load.prom"
VLLM_IDLE = "vllm-0.32-cpu-openai-server-after-load.prom"
RAY_BUSY = "ray-serve-llm-vllm-0.32-cpu-under-load.prom"
RAY_AFTER = "ray-serve-llm-vllm-0.32-cpu.prom"
SERIES_DIR = "series-vllm-0.32-cpu"


def fixture(name: str) -> str:
    return shared_path("fixtures", "metrics", name).read_text()


def series_files() -> list[tuple[float, str]]:
    """(timestamp from the file name ``NN_<unix-ts>.prom``, text), in order."""
    folder = shared_path("fixtures", "metrics", SERIES_DIR)
    files = sorted(folder.glob("*.prom"))
    assert len(files) == 15
    return [(float(p.stem.split("_", 1)[1]), p.read_text()) for p in files]


def all_fixture_paths() -> list[str]:
    tops = [VLLM_BUSY, VLLM_IDLE, RAY_BUSY, RAY_AFTER]
    # Names only: the files are looked up inside each test, so a missing ../shared skips.
    series = [f"{SERIES_DIR}/{i:02d}" for i in range(15)]
    return tops + series


def load(name: str) -> str:
    if name.startswith(SERIES_DIR):
        index = int(name.rsplit("/", 1)[1])
        return series_files()[index][1]
    return fixture(name)


# -- by-hand reading of an exposition: plain string operations ------------------------------


def hand_samples(text: str, raw_name: str) -> list[tuple[str, float]]:
    """(label text, value) of every sample line named exactly ``raw_name``."""
    out = []
    for line in text.splitlines():
        if line.startswith(raw_name + "{") or line.startswith(raw_name + " "):
            labels = line[line.index("{") + 1 : line.rindex("}")] if "{" in line else ""
            out.append((labels, float(line.rsplit(" ", 1)[1])))
    return out


def hand_sum(text: str, raw_name: str, label_contains: str = "") -> float:
    return sum(v for labels, v in hand_samples(text, raw_name) if label_contains in labels)


def hand_buckets(text: str, raw_name: str) -> dict[str, float]:
    """``{le text: count}`` of ``<raw_name>_bucket``, summed over series."""
    out: dict[str, float] = {}
    for labels, value in hand_samples(text, raw_name + "_bucket"):
        le = re.search(r'le="([^"]+)"', labels).group(1)
        out[le] = out.get(le, 0.0) + value
    return out


def prefix_of(text: str) -> str:
    return "ray_vllm_" if "\nray_vllm_" in text else "vllm:"


def le_key(le: str) -> float:
    return float("inf") if le == "+Inf" else float(le)


# -- parsing ---------------------------------------------------------------------------------


class TestParseEveryFixture:
    @pytest.mark.parametrize("name", all_fixture_paths())
    def test_totals_match_the_file(self, name: str) -> None:
        text = load(name)
        prefix = prefix_of(text)
        snap = parse_exposition(text, timestamp=1.0)

        for counter in COUNTERS:
            assert snap.counter(counter) == hand_sum(text, prefix + counter), counter
        for gauge in ("num_requests_running", "num_requests_waiting"):
            assert snap.gauge_sum(gauge) == hand_sum(text, prefix + gauge), gauge
        for reason in ("stop", "length", "abort", "error"):
            expected = hand_sum(text, prefix + "request_success_total", f'"{reason}"')
            assert snap.success_by_reason.get(reason, 0.0) == expected
        for hist in ("time_to_first_token_seconds", "inter_token_latency_seconds"):
            got = snap.histogram(hist)
            want = hand_buckets(text, prefix + hist)
            assert got is not None and want
            assert got.bucket_map() == {le_key(k): v for k, v in want.items()}
            assert got.count == hand_sum(text, prefix + hist + "_count")
            assert got.sum == pytest.approx(hand_sum(text, prefix + hist + "_sum"))
        assert snap.timestamp == 1.0


class TestRayContextLabels:
    """Ray's where-and-by-what labels are dropped before parsing; identity labels are kept."""

    def test_every_ray_series_keeps_its_identity_and_loses_only_the_context(self) -> None:
        for name in (RAY_BUSY, RAY_AFTER):
            text = fixture(name)
            snap = parse_exposition(text)
            keys = {k for group in (snap.counters, snap.gauges, snap.histograms) for s in group.values() for k in s}
            names = {label for key in keys for label, _ in key}
            assert names and not names & set(RAY_CONTEXT_LABELS)
            assert {"ReplicaId", "WorkerId", "engine", "model_name"} <= names
            # Exactly as many distinct series as the file has (nothing merged by the drop).
            raw = {
                line.split(" ")[0] for line in text.splitlines() if line.startswith("ray_vllm_num_requests_running{")
            }
            assert len(snap.gauges["num_requests_running"]) == len(raw)

    def test_a_label_value_that_looks_like_a_context_label_is_left_alone(self) -> None:
        line = (
            'ray_vllm_num_requests_running{Component="core_worker",ReplicaId="r1",'
            'model_name="a,Version=\\"x\\",b",otel_scope_version=""} 2\n'
        )
        (key,) = parse_exposition(line).gauges["num_requests_running"]
        assert dict(key) == {"ReplicaId": "r1", "model_name": 'a,Version="x",b'}

    def test_vllm_lines_are_not_touched(self) -> None:
        line = 'vllm:num_requests_running{Version="1",engine="0",model_name="m"} 2\n'
        (key,) = parse_exposition(line).gauges["num_requests_running"]
        assert dict(key) == {"Version": "1", "engine": "0", "model_name": "m"}


class TestParseExposition:
    def test_saturated_vllm_server(self) -> None:
        snap = parse_exposition(fixture(VLLM_BUSY))
        point = derive(None, snap)
        assert (point.running, point.waiting) == (4.0, 30.0)
        assert point.kv_cache_pct == pytest.approx(95.65, abs=0.005)  # 0.9565217391304348
        assert snap.counter("prompt_tokens_total") == 2662.0
        assert snap.counter("generation_tokens_total") == 3348.0
        assert snap.counter("num_preemptions_total") == 41.0
        assert snap.counter("prefix_cache_queries_total") == 2662.0
        assert snap.counter("prefix_cache_hits_total") == 2016.0
        assert snap.success_by_reason == {
            "stop": 0.0,
            "length": 14.0,
            "abort": 0.0,
            "error": 0.0,
            "repetition": 0.0,
        }
        ttft = snap.histogram("time_to_first_token_seconds")
        assert ttft.count == 22.0
        assert ttft.bucket_map()[0.25] == 8.0 and ttft.bucket_map()[1.0] == 13.0
        assert ttft.sum == pytest.approx(18.178288459777832)

    def test_ray_serve_exposition_mid_burst(self) -> None:
        text = fixture(RAY_BUSY)
        snap = parse_exposition(text)
        # Read off the file: one replica (ReplicaId="bia1gpiu") in this capture.
        assert snap.gauge_sum("num_requests_running") == 39.0
        assert snap.gauge_sum("num_requests_waiting") == 0.0
        assert snap.counter("prompt_tokens_total") == 7729.0
        assert snap.counter("generation_tokens_total") == 8193.0
        assert snap.success_by_reason == {"length": 35.0, "stop": 7.0}
        assert snap.histogram("time_to_first_token_seconds").count == 81.0
        # Ray exports a counter only after its first increment: no hit line, so 0 hits.
        assert "ray_vllm_prefix_cache_hits_total" not in text
        assert snap.counter("prefix_cache_hits_total") == 0.0
        assert snap.replica_count == 1

    def test_ray_serve_exposition_after_load(self) -> None:
        snap = parse_exposition(fixture(RAY_AFTER))
        assert snap.counter("prompt_tokens_total") == 1921.0
        assert snap.counter("generation_tokens_total") == 1828.0
        assert snap.success_by_reason == {"length": 26.0, "stop": 7.0}
        assert snap.gauge_sum("num_requests_running") == 0.0

    def test_replicas_of_one_deployment_are_summed(self) -> None:
        # A second replica made from the real capture: the same lines under another ReplicaId.
        text = fixture(RAY_BUSY)
        second = "\n".join(
            line.replace('ReplicaId="bia1gpiu"', 'ReplicaId="second"')
            for line in text.splitlines()
            if line.startswith("ray_vllm_")
        )
        snap = parse_exposition(text + "\n" + second + "\n")
        assert snap.replica_count == 2
        assert snap.gauge_sum("num_requests_running") == 78.0
        assert snap.counter("generation_tokens_total") == 2 * 8193.0
        assert snap.success_by_reason == {"length": 70.0, "stop": 14.0}
        assert snap.histogram("time_to_first_token_seconds").count == 162.0
        # A ratio is averaged, not summed: two replicas at 0.95 % are not at 1.9 %.
        assert derive(None, snap).kv_cache_pct == pytest.approx(0.9522646807471613)

    def test_ray_serve_reports_the_engines_replicas_and_their_target(self) -> None:
        """From Ray Serve's controller gauges, for the LLMServer deployment only (not the ingress)."""
        text = fixture(RAY_BUSY)
        point = derive(None, parse_exposition(text))
        assert (point.replicas_running, point.replicas_target) == (1.0, 1.0)
        scaled = text.replace(
            'deployment="LLMServer:tiny",otel_scope_name="ray._private.telemetry.open_telemetry_metric_recorder",'
            'otel_scope_schema_url="",otel_scope_version=""} 1.0',
            'deployment="LLMServer:tiny",otel_scope_name="ray._private.telemetry.open_telemetry_metric_recorder",'
            'otel_scope_schema_url="",otel_scope_version=""} 3.0',
        )
        assert parse_exposition(scaled).serve_replicas() == (1.0, 3.0)  # scaling up: 1 running, target 3
        vllm = derive(None, parse_exposition(fixture(VLLM_BUSY)))
        assert (vllm.replicas_running, vllm.replicas_target) == (None, None)  # vLLM alone: no replicas

    def test_ray_serves_gauges_alone_are_no_vllm_exposition(self) -> None:
        serve_only = "\n".join(line for line in fixture(RAY_BUSY).splitlines() if "ray_serve_" in line) + "\n"
        with pytest.raises(ScrapeError, match="no vllm"):
            parse_exposition(serve_only)
        assert parse_exposition(serve_only, require_vllm=False).empty

    def test_filtered_parse_equals_a_full_parse_of_the_same_families(self) -> None:
        text = fixture(RAY_AFTER)
        kept = filter_exposition(text)
        assert len(kept) < len(text) / 5  # ~900 kB → the vLLM families and Ray Serve's replica gauges only
        families = ("ray_vllm_", *SERVE_GAUGES)
        assert all(
            line.startswith((*families, *(f"# {kind} {name}" for kind in ("HELP", "TYPE") for name in families)))
            for line in kept.splitlines()
        )
        full = {
            s.name: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name in ("ray_vllm_generation_tokens_total", "ray_vllm_num_requests_running")
        }
        snap = parse_exposition(text)
        assert snap.counter("generation_tokens_total") == full["ray_vllm_generation_tokens_total"]
        assert snap.gauge_sum("num_requests_running") == full["ray_vllm_num_requests_running"]

    def test_match_labels_picks_one_deployment(self) -> None:
        text = fixture(VLLM_BUSY)
        assert parse_exposition(text, match_labels={"model_name": "tiny"}).counter("generation_tokens_total") == 3348.0
        with pytest.raises(ScrapeError, match="no vllm"):
            parse_exposition(text, match_labels={"model_name": "other"})

    @pytest.mark.parametrize(
        "garbage",
        [
            "",
            "<html><body>502 Bad Gateway</body></html>",
            "# HELP up whether\n# TYPE up gauge\nup 1\n",  # valid, but not vLLM
            'vllm:num_requests_running{engine="0" 4.0\n',  # broken label set
            "vllm:num_requests_running not-a-number\n",
        ],
    )
    def test_garbage_is_a_scrape_error(self, garbage: str) -> None:
        with pytest.raises(ScrapeError):
            parse_exposition(garbage)

    def test_snapshot_round_trips_through_strict_json(self) -> None:
        snap = parse_exposition(fixture(RAY_BUSY), timestamp=123.5)
        stored = json.dumps(snap.to_dict(), allow_nan=False)  # what a JSONField accepts
        back = Snapshot.from_dict(json.loads(stored))
        assert back == snap


# -- derivation ------------------------------------------------------------------------------


class TestMerged:
    def test_disjoint_nodes_pool_their_series_and_a_shared_key_adds(self) -> None:
        vllm, ray = parse_exposition(fixture(VLLM_BUSY), 10.0), parse_exposition(load(RAY_BUSY), 12.0)
        both = Snapshot.merged([vllm, ray])
        assert both.timestamp == 12.0
        for name in COUNTERS:
            assert both.counter(name) == pytest.approx(vllm.counter(name) + ray.counter(name))
        assert both.replica_count == vllm.replica_count + ray.replica_count
        twice = Snapshot.merged([vllm, vllm])
        hist = vllm.histogram("e2e_request_latency_seconds")
        doubled = twice.histogram("e2e_request_latency_seconds")
        assert (doubled.count, doubled.sum) == (2 * hist.count, 2 * hist.sum)
        assert doubled.buckets == tuple((le, 2 * c) for le, c in hist.buckets)
        assert Snapshot.merged([vllm]) == vllm and Snapshot.merged([parse_exposition("", require_vllm=False)]).empty


class TestHistogramQuantile:
    def test_interpolates_inside_the_bucket(self) -> None:
        # 10 in (0, 1], 10 in (1, 2]: the median is the top of the first bucket, p75 at 1.5.
        buckets = {1.0: 10.0, 2.0: 20.0, float("inf"): 20.0}
        assert histogram_quantile(0.5, buckets) == 1.0
        assert histogram_quantile(0.75, buckets) == 1.5

    def test_rank_in_the_inf_bucket_gives_the_highest_finite_bound(self) -> None:
        assert histogram_quantile(0.99, {1.0: 1.0, 2.0: 2.0, float("inf"): 10.0}) == 2.0

    def test_no_observations_is_none(self) -> None:
        assert histogram_quantile(0.5, {1.0: 0.0, float("inf"): 0.0}) is None
        assert histogram_quantile(0.5, {}) is None


def hand_quantile(q: float, deltas: dict[float, float]) -> float | None:
    """Textbook histogram_quantile, written again for the comparison."""
    les = sorted(deltas)
    total = deltas[les[-1]]
    if total == 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le in les:
        if deltas[le] >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / (deltas[le] - below)
        lower, below = le, deltas[le]
    return None


class TestDeriveOverTheSeries:
    @pytest.fixture
    def points(self) -> list[MetricPoint]:
        prev, out = None, []
        for ts, text in series_files():
            cur = parse_exposition(text, timestamp=ts)
            out.append(derive(prev, cur))
            prev = cur
        return out

    def test_first_point_has_gauges_but_no_rates(self, points: list[MetricPoint]) -> None:
        first = points[0]
        assert first.running == 0.0 and first.kv_cache_pct == 0.0
        assert first.generation_tokens_per_s is None and first.ttft_p95 is None

    def test_generation_tokens_per_second_by_hand(self, points: list[MetricPoint]) -> None:
        files = series_files()
        for i in range(1, len(files)):
            (t0, a), (t1, b) = files[i - 1], files[i]
            by_hand = (hand_sum(b, "vllm:generation_tokens_total") - hand_sum(a, "vllm:generation_tokens_total")) / (
                t1 - t0
            )
            assert points[i].generation_tokens_per_s == pytest.approx(by_hand)
            assert points[i].interval_s == pytest.approx(t1 - t0)
        # Written out: (11544 - 9600) / 2.001 and (15419 - 11544) / 2.000, then idle.
        assert points[1].generation_tokens_per_s == pytest.approx(971.514, abs=1e-3)
        assert points[2].generation_tokens_per_s == pytest.approx(1937.5)
        assert all(p.generation_tokens_per_s == 0.0 for p in points[4:])

    def test_ttft_quantiles_by_hand(self, points: list[MetricPoint]) -> None:
        files = series_files()
        for i in range(1, len(files)):
            before = hand_buckets(files[i - 1][1], "vllm:time_to_first_token_seconds")
            after = hand_buckets(files[i][1], "vllm:time_to_first_token_seconds")
            deltas = {le_key(le): after[le] - before[le] for le in after}
            assert points[i].ttft_p50 == pytest.approx(hand_quantile(0.5, deltas))
            assert points[i].ttft_p95 == pytest.approx(hand_quantile(0.95, deltas))
        # 00→01: 20 new TTFTs; deltas 3 ≤0.08, 8 ≤0.1, 9 ≤0.25, 11 ≤0.5, 17 ≤0.75, 20 ≤1.0.
        # p50 rank 10 → 0.25 + 0.25·(10-9)/(11-9) = 0.375; p95 rank 19 → 0.75 + 0.25·2/3.
        assert points[1].ttft_p50 == pytest.approx(0.375)
        assert points[1].ttft_p95 == pytest.approx(0.75 + 0.25 * 2 / 3)
        # 01→02: all 24 new TTFTs in (1.0, 2.5]: p50 = 1 + 1.5·12/24, p95 = 1 + 1.5·22.8/24.
        assert points[2].ttft_p50 == pytest.approx(1.75)
        assert points[2].ttft_p95 == pytest.approx(2.425)
        # Idle intervals observed nothing: no quantile rather than a made-up zero.
        assert all(p.ttft_p95 is None and p.itl_p50 is None for p in points[4:])

    def test_other_rates_in_the_burst(self, points: list[MetricPoint]) -> None:
        files = series_files()
        (t0, a), (t1, b) = files[0], files[1]
        dt = t1 - t0
        p = points[1]
        assert p.requests_per_s == pytest.approx(
            (hand_sum(b, "vllm:request_success_total") - hand_sum(a, "vllm:request_success_total")) / dt
        )
        assert p.errors_per_s == 0.0
        assert p.preemptions_per_s == pytest.approx((164.0 - 143.0) / dt)
        hits = hand_sum(b, "vllm:prefix_cache_hits_total") - hand_sum(a, "vllm:prefix_cache_hits_total")
        queries = hand_sum(b, "vllm:prefix_cache_queries_total") - hand_sum(a, "vllm:prefix_cache_queries_total")
        assert p.prefix_cache_hit_pct == pytest.approx(100 * hits / queries)
        assert (p.running, p.waiting, p.kv_cache_pct) == (7.0, 17.0, 100.0)


class TestDeriveEdgeCases:
    def test_counter_reset_counts_the_new_value_as_the_increase(self) -> None:
        # The idle capture (prompt 5808) then the busy one (2662): the server restarted.
        before = parse_exposition(fixture(VLLM_IDLE), timestamp=1000.0)
        after = parse_exposition(fixture(VLLM_BUSY), timestamp=1010.0)
        point = derive(before, after)
        assert point.prompt_tokens_per_s == pytest.approx(2662.0 / 10)
        assert point.generation_tokens_per_s == pytest.approx(3348.0 / 10)
        assert point.preemptions_per_s == pytest.approx(41.0 / 10)
        assert point.requests_per_s == pytest.approx(14.0 / 10)
        # TTFT count fell 48 → 22: the quantiles come from the 22 new observations alone.
        assert point.ttft_p50 == pytest.approx(
            hand_quantile(
                0.5,
                {le_key(k): v for k, v in hand_buckets(fixture(VLLM_BUSY), "vllm:time_to_first_token_seconds").items()},
            )
        )

    def test_errors_are_reasons_other_than_stop_length_repetition(self) -> None:
        text = fixture(VLLM_IDLE)
        later = text.replace(
            'finished_reason="abort",model_name="tiny"} 0.0',
            'finished_reason="abort",model_name="tiny"} 3.0',
        ).replace(
            'finished_reason="error",model_name="tiny"} 0.0',
            'finished_reason="error",model_name="tiny"} 1.0',
        )
        assert later != text
        point = derive(parse_exposition(text, 0.0), parse_exposition(later, 2.0))
        assert point.errors_per_s == pytest.approx(2.0)
        assert point.requests_per_s == pytest.approx(2.0)

    def _two_replicas(self) -> str:
        text = fixture(RAY_BUSY)
        second = "\n".join(
            line.replace('ReplicaId="bia1gpiu"', 'ReplicaId="second"')
            for line in text.splitlines()
            if line.startswith("ray_vllm_")
        )
        return text + "\n" + second + "\n"

    def test_scale_down_is_not_a_counter_reset(self) -> None:
        # Summing first would see generation tokens fall 16386 → 8193 and call it a reset.
        point = derive(parse_exposition(self._two_replicas(), 0.0), parse_exposition(fixture(RAY_BUSY), 10.0))
        assert point.generation_tokens_per_s == 0.0
        assert point.requests_per_s == 0.0

    def test_a_new_replica_does_not_spike_the_rates(self) -> None:
        point = derive(parse_exposition(fixture(RAY_BUSY), 0.0), parse_exposition(self._two_replicas(), 10.0))
        assert point.generation_tokens_per_s == 0.0

    def test_a_counter_ray_creates_late_counts_from_zero(self) -> None:
        text = fixture(RAY_BUSY)
        queries = next(ln for ln in text.splitlines() if ln.startswith("ray_vllm_prefix_cache_q"))
        labels = queries[queries.index("{") : queries.rindex("}") + 1]
        later = (
            text.replace(
                f"ray_vllm_prefix_cache_queries_total{labels} 7729.0",
                f"ray_vllm_prefix_cache_queries_total{labels} 7829.0",
            )
            + f"ray_vllm_prefix_cache_hits_total{labels} 40.0\n"
        )
        point = derive(parse_exposition(text, 0.0), parse_exposition(later, 10.0))
        assert point.prefix_cache_hit_pct == pytest.approx(40.0)  # 40 hits / 100 lookups

    def test_same_instant_gives_no_rates(self) -> None:
        snap = parse_exposition(fixture(VLLM_BUSY), 5.0)
        assert derive(snap, snap).generation_tokens_per_s is None


# -- sources ---------------------------------------------------------------------------------


def prometheus_answer(query: str) -> dict:
    """A stand-in Prometheus's answer: one deployment's figures, NaN for its quantiles (what
    histogram_quantile gives over buckets that did not move)."""
    metric = {"namespace": "team-a", "model_name": "tiny"}
    if "histogram_quantile" in query:
        result = [{"metric": {**metric, "quantile": q}, "value": [1796003900.5, "NaN"]} for q in ("0.5", "0.95")]
    elif "finished_reason" in query:
        result = [
            {"metric": {**metric, "finished_reason": reason}, "value": [1796003900.5, rate]}
            for reason, rate in (("stop", "3"), ("length", "1"), ("abort", "0.5"))
        ]
    elif "num_requests_running" in query:
        result = [
            {"metric": {**metric, "__name__": f"vllm:num_requests_{n}"}, "value": [1796003900.5, v]}
            for n, v in (("running", "4"), ("waiting", "30"))
        ]
    elif "prefix_cache_hits" in query:
        result = []  # Ray exports this counter only after the first hit
    else:
        result = [{"metric": metric, "value": [1796003900.5, "0.5"]}]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


class _Handler(BaseHTTPRequestHandler):
    fixtures: dict[str, str] = {}
    queries: list[str] = []

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass

    def _send(self, status: int, body: str, content_type: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlparse(self.path)
        try:
            if url.path == "/metrics":
                self._send(200, self.fixtures["busy"])
            elif url.path == "/ray":
                self._send(200, self.fixtures["ray"])
            elif url.path == "/slow":
                time.sleep(3)
                self._send(200, self.fixtures["busy"])
            elif url.path == "/drip":
                # Headers at once, then a byte now and then: no single read ever times out.
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                for _ in range(20):
                    self.wfile.write(b"#")
                    self.wfile.flush()
                    time.sleep(0.25)
            elif url.path == "/garbage":
                self._send(200, "<html><body>hello</body></html>", "text/html")
            elif url.path == "/api/v1/query":
                query = parse_qs(url.query)["query"][0]
                self.queries.append(query)
                self._send(200, json.dumps(prometheus_answer(query)))
            elif url.path == "/matrix/api/v1/query":
                self._send(200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}))
            elif url.path == "/bad/api/v1/query":
                self._send(200, json.dumps({"status": "error", "errorType": "bad_data", "error": "parse"}))
            else:
                self._send(500, "boom")
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: that is the test
            pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.fixtures = {"busy": fixture(VLLM_BUSY), "ray": fixture(RAY_BUSY)}
    _Handler.queries = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class TestScrape:
    def test_scrapes_a_real_exposition(self, server: str) -> None:
        snap = scrape(server + "/metrics", timeout=5)
        assert snap.gauge_sum("num_requests_waiting") == 30.0
        assert abs(snap.timestamp - time.time()) < 5

    def test_slow_endpoint_times_out(self, server: str) -> None:
        started = time.monotonic()
        with pytest.raises(ScrapeError, match="timed out"):
            scrape(server + "/slow", timeout=0.5)
        assert time.monotonic() - started < 2

    def test_dripping_endpoint_hits_the_overall_deadline(self, server: str) -> None:
        started = time.monotonic()
        with pytest.raises(ScrapeError):
            scrape(server + "/drip", timeout=1.0)
        assert time.monotonic() - started < 2.5

    @pytest.mark.parametrize("path", ["/garbage", "/missing"])
    def test_garbage_and_http_errors(self, server: str, path: str) -> None:
        with pytest.raises(ScrapeError):
            scrape(server + path, timeout=2)

    def test_refused_connection(self) -> None:
        with pytest.raises(ScrapeError):
            scrape("http://127.0.0.1:9/metrics", timeout=1)

    def test_scrape_many_is_not_held_up_by_a_slow_target(self, server: str) -> None:
        targets = {
            1: server + "/metrics",
            2: server + "/ray",
            3: server + "/slow",
            4: server + "/garbage",
        }
        started = time.monotonic()
        results = scrape_many(targets, timeout=0.5)
        assert time.monotonic() - started < 2.0  # not the 3 s the slow one takes
        assert results[1].gauge_sum("num_requests_running") == 4.0
        assert results[2].gauge_sum("num_requests_running") == 39.0
        assert isinstance(results[3], ScrapeError)
        assert isinstance(results[4], ScrapeError)
        assert scrape_many({}, timeout=1) == {}

    def test_a_target_of_several_urls_is_merged_and_fails_as_a_whole(self, server: str) -> None:
        results = scrape_many(
            {
                "two-nodes": [server + "/metrics", server + "/ray"],
                "one-bad": [server + "/metrics", server + "/missing"],
                "one-slow": [server + "/metrics", server + "/slow"],
                "none": [],
            },
            timeout=0.5,
        )
        merged = results["two-nodes"]
        assert merged.gauge_sum("num_requests_running") == 4.0 + 39.0
        assert merged.replica_count == scrape(server + "/metrics").replica_count + scrape(server + "/ray").replica_count
        assert "/missing" in str(results["one-bad"]) and "/slow" in str(results["one-slow"])
        assert isinstance(results["none"], ScrapeError)

    def test_targets_beyond_the_workers_get_their_own_time(self, server: str) -> None:
        targets = {i: server + "/metrics" for i in range(6)}
        results = scrape_many(targets, timeout=2, max_workers=2)
        assert all(r.gauge_sum("num_requests_running") == 4.0 for r in results.values())


class TestFleetQueries:
    """The request side of runtime.exposition.promql (the maths is checked against a real
    Prometheus in tests/metrics/test_prometheus.py)."""

    def test_a_cycle_is_the_same_fixed_set_of_queries_for_any_fleet(self, server: str) -> None:
        one = fleet_points(server, window_s=60, at=1796003900.5, keys=[("team-a", "tiny")])
        first = list(_Handler.queries)
        fleet = fleet_points(server, window_s=60, at=1796003900.5, keys=[(f"ns-{i}", "m") for i in range(1000)])
        assert len(first) == QUERY_COUNT and sorted(_Handler.queries[QUERY_COUNT:]) == sorted(first)
        assert QUERY_COUNT <= len(COUNTERS) + len(GAUGES) + len(HISTOGRAMS)  # at most one per family
        assert fleet == {}  # none of those deployments is in the answer
        (point,) = one.values()
        assert (point.running, point.waiting, point.kv_cache_pct) == (4.0, 30.0, 50.0)
        assert point.requests_per_s == 4.5 and point.errors_per_s == 0.5  # abort is not a normal end
        assert point.requests_finished == 4.5 * 60 and point.requests_failed == 0.5 * 60
        assert point.prefix_cache_hits == 0.0 and point.prefix_cache_hit_pct == 0.0  # absent counter = 0
        assert point.ttft_p95 is None  # NaN: no request in the window

    def test_prometheus_error_is_a_scrape_error(self, server: str) -> None:
        with pytest.raises(ScrapeError, match="bad_data"):
            fleet_points(server + "/bad", window_s=60)

    def test_a_non_vector_answer_is_a_scrape_error(self, server: str) -> None:
        with pytest.raises(ScrapeError, match="matrix"):
            fleet_points(server + "/matrix", window_s=60)

    def test_unreachable_prometheus_is_a_scrape_error(self) -> None:
        with pytest.raises(ScrapeError):
            fleet_points("http://127.0.0.1:9", window_s=60, timeout=1)

    def test_a_point_rescaled_to_the_cycle_keeps_its_rates_and_ratios(self, server: str) -> None:
        (point,) = fleet_points(server, window_s=120, keys=[("team-a", "tiny")]).values()
        short = rescaled(point, 15)
        assert short.interval_s == 15 and short.requests_per_s == point.requests_per_s
        assert short.requests_finished == pytest.approx(4.5 * 15) and short.prefix_cache_queries == pytest.approx(7.5)
