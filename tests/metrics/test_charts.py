"""metrics.charts: figures checked on their data, built from the real 15-scrape series."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime

import plotly.graph_objects as go
import pytest

from metrics import charts
from metrics.aggregate import COLUMNS, RATIOS, with_ratios
from runtime.exposition.derive import SERIES_FIELDS, MetricPoint, derive
from runtime.exposition.parse import parse_exposition
from tests.support.shared import shared_path


@pytest.fixture
def data() -> tuple[list[float], dict[str, list[float | None]]]:
    folder = shared_path("fixtures", "metrics", "series-vllm-0.32-cpu")
    prev, points = None, []
    for path in sorted(folder.glob("*.prom")):
        cur = parse_exposition(path.read_text(), timestamp=float(path.stem.split("_", 1)[1]))
        points.append(derive(prev, cur))
        prev = cur
    timestamps = [p.timestamp for p in points]
    # Raw points: no peaks (metrics.aggregate.PEAKS are a rollup's).
    series = with_ratios({name: [getattr(p, name, None) for p in points] for name in COLUMNS})
    return timestamps, series


TRACES = {
    "tokens": [("prompt", "prompt_tokens_per_s"), ("generation", "generation_tokens_per_s")],
    "requests": [("finished", "requests_per_s"), ("errors", "errors_per_s")],
    "queue": [("running", "running"), ("waiting", "waiting")],
    "queue_time": [("p50", "queue_p50"), ("p95", "queue_p95")],
    "waiting_reasons": [("capacity", "waiting_capacity"), ("deferred", "waiting_deferred")],
    "rejections": [
        ("request limit", "rejected_queued_reqs_per_s"),
        ("token limit", "rejected_queued_tokens_per_s"),
    ],
    "kv_cache": [("KV cache", "kv_cache_pct")],
    "replicas": [("running", "replicas_running"), ("target", "replicas_target")],
    "ttft": [("p50", "ttft_p50"), ("p95", "ttft_p95")],
    "prefill": [("p50", "prefill_p50"), ("p95", "prefill_p95")],
    "decode": [("p50", "decode_p50"), ("p95", "decode_p95")],
    "itl": [("p50", "itl_p50"), ("p95", "itl_p95")],
    "e2e": [("p50", "e2e_p50"), ("p95", "e2e_p95")],
    "prefix_cache": [("per window", "prefix_cache_hit_pct"), ("cumulative", "prefix_cache_hit_pct_cumulative")],
    "preemptions": [("preemptions", "preemptions_per_s")],
}
Y_UNITS = {
    "tokens": "tokens/s",
    "requests": "requests/s",
    "queue": "requests",
    "queue_time": "seconds",
    "waiting_reasons": "requests",
    "rejections": "rejections/s",
    "kv_cache": "%",
    "replicas": "replicas",
    "ttft": "seconds",
    "prefill": "seconds",
    "decode": "seconds",
    "itl": "seconds",
    "e2e": "seconds",
    "prefix_cache": "%",
    "preemptions": "preemptions/s",
}
# Charts of gauges (one reading per scrape); every other chart's points cover the rate window.
SAMPLED = {"queue", "waiting_reasons", "kv_cache", "replicas"}


class TestDashboard:
    def test_every_chart_plots_its_series(self, data) -> None:
        timestamps, series = data
        figures = charts.dashboard(timestamps, series)
        assert list(figures) == list(TRACES)
        x = [datetime.fromtimestamp(t, UTC) for t in timestamps]
        for key, fig in figures.items():
            assert isinstance(fig, go.Figure)
            # What an engine does not report (replicas without Ray Serve, peaks of raw points) is left out.
            expected = [
                (name, series[field])
                for name, field in TRACES[key]
                if field not in charts.OPTIONAL or any(v is not None for v in series[field])
            ]
            assert [(t.name, list(t.y)) for t in fig.data] == expected, key
            assert all(list(t.x) == x for t in fig.data)
            assert fig.layout.yaxis.title.text == Y_UNITS[key]
            assert fig.layout.xaxis.title.text == "Time (UTC)"
            assert fig.layout.title.text

    def test_every_metric_point_field_is_on_some_chart(self) -> None:
        plotted = {field for traces in TRACES.values() for _, field in traces}
        numeric = {f.name for f in fields(MetricPoint)} - {"timestamp", "interval_s"}
        assert numeric == set(SERIES_FIELDS)
        # Ratio parts are plotted as their ratios (divided at read time), plus the cumulative one.
        parts = {name for pair in RATIOS.values() for name in pair}
        shown = (numeric - parts) | {"prefix_cache_hit_pct", "prefix_cache_hit_pct_cumulative"}
        assert plotted == shown

    def test_every_title_says_the_window_its_points_cover(self, data) -> None:
        timestamps, series = data
        for key, fig in charts.dashboard(timestamps, series, window_s=60.0).items():
            said = "at each scrape" if key in SAMPLED else "over 60 s"
            assert fig.layout.title.text.endswith(f" · {said}"), key
        coarse = charts.dashboard(timestamps, series, window_s=600.0)
        assert coarse["tokens"].layout.title.text == "Throughput · over 10 min"
        assert coarse["queue_time"].layout.title.text == "Queue time · over 10 min"

    def test_request_phases_and_waiting_reasons_from_the_burst(self, data) -> None:
        timestamps, series = data
        figures = charts.dashboard(timestamps, series)
        queue_p95 = figures["queue_time"].data[1].y
        # vllm:request_queue_time_seconds of the 25 requests finished in the burst's second
        # interval (its count went 60 → 85): p95 inside the (1.0, 2.5] bucket.
        assert queue_p95[2] == pytest.approx(1.492, abs=0.001) and queue_p95[5] is None  # idle: no requests
        assert figures["prefill"].data[1].y[2] == pytest.approx(0.285, abs=0.001)
        assert figures["decode"].data[1].y[2] == pytest.approx(0.938, abs=0.001)
        capacity, deferred = figures["waiting_reasons"].data
        assert list(capacity.y[:4]) == [0.0, 17.0, 18.0, 0.0] and set(deferred.y) == {0.0}
        assert series["waiting"][1:3] == [17.0, 18.0]  # capacity + deferred = waiting
        # vLLM 0.32 counts admission rejections from the start; none in this burst.
        assert set(figures["rejections"].data[0].y[1:]) == {0.0}

    def test_values_from_the_burst(self, data) -> None:
        timestamps, series = data
        tokens = charts.tokens_chart(timestamps, series)
        generation = tokens.data[1].y
        assert generation[0] is None  # first scrape: no rate yet, drawn as a gap
        assert generation[2] == pytest.approx(1937.5)  # (15419 - 11544) / 2.000
        ttft = charts.ttft_chart(timestamps, series)
        assert ttft.data[1].y[2] == pytest.approx(2.425)
        kv = charts.kv_cache_chart(timestamps, series)
        assert list(kv.layout.yaxis.range) == [0, 100]
        assert kv.data[0].y[1] == 100.0

    def test_gaps_survive_the_json(self, data) -> None:
        timestamps, series = data
        payload = json.loads(charts.figure_json(charts.ttft_chart(timestamps, series)))
        assert payload["data"][0]["y"][0] is None
        assert payload["data"][0]["y"][1] == pytest.approx(0.375)
        assert payload["layout"]["yaxis"]["title"]["text"] == "seconds"

    def test_replicas_running_against_target_where_ray_serve_reports_them(self) -> None:
        fig = charts.replicas_chart([1.0, 2.0], {"replicas_running": [1.0, 1.0], "replicas_target": [1.0, 3.0]})
        assert [(t.name, list(t.y), t.line.dash) for t in fig.data] == [
            ("running", [1.0, 1.0], "solid"),
            ("target", [1.0, 3.0], "dot"),
        ]
        assert charts.replicas_chart([1.0, 2.0], {}).data == ()  # vLLM alone: nothing to draw

    def test_every_axis_has_the_one_style(self, data) -> None:
        """Horizontal tick labels everywhere: Plotly tilts crowded ones unless told not to."""
        timestamps, series = data
        figures = [
            *charts.dashboard(timestamps, series).values(),
            charts.quota_bars([charts.QuotaRow("a / b", 1, 2, 3)]),
        ]
        for fig in figures:
            assert (fig.layout.xaxis.tickangle, fig.layout.yaxis.tickangle) == (0, 0), fig.layout.title.text
            assert fig.layout.xaxis.automargin and fig.layout.yaxis.automargin

    def test_datetimes_are_accepted_as_x(self) -> None:
        when = [datetime(2026, 11, 30, 1, 0, tzinfo=UTC), datetime(2026, 11, 30, 1, 1, tzinfo=UTC)]
        fig = charts.queue_chart(when, {"running": [1.0, 2.0], "waiting": [0.0, 5.0]})
        assert list(fig.data[0].x) == when and list(fig.data[1].y) == [0.0, 5.0]

    def test_a_missing_series_is_all_gaps(self) -> None:
        fig = charts.preemptions_chart([1.0, 2.0], {})
        assert list(fig.data[0].y) == [None, None]

    def test_mismatched_lengths_are_refused(self) -> None:
        with pytest.raises(ValueError, match="running"):
            charts.queue_chart([1.0, 2.0], {"running": [1.0], "waiting": [0.0, 1.0]})


class TestQuotaBars:
    def test_bars_per_flavor(self) -> None:
        fig = charts.quota_bars(
            [
                charts.QuotaRow(label="h100-80gb", reserved=6, nominal=8, borrowable=4),
                {"label": "a100-40gb", "reserved": 0, "nominal": 2, "borrowable": 0},
            ],
            title="team-a GPU quota",
        )
        assert [(t.name, list(t.x), list(t.y)) for t in fig.data] == [
            ("reserved", ["h100-80gb", "a100-40gb"], [6, 0]),
            ("nominal", ["h100-80gb", "a100-40gb"], [8, 2]),
            ("borrowable", ["h100-80gb", "a100-40gb"], [4, 0]),
        ]
        assert fig.layout.barmode == "group"
        assert fig.layout.title.text == "team-a GPU quota"
        assert fig.layout.yaxis.title.text == "GPUs"
        assert fig.layout.yaxis.dtick == 1  # whole GPUs while the numbers are small

    def test_large_quotas_let_plotly_choose_ticks(self) -> None:
        fig = charts.quota_bars([{"label": "h100", "reserved": 64, "nominal": 512, "borrowable": 0}])
        assert fig.layout.yaxis.dtick is None

    def test_no_quota_rows_gives_empty_bars(self) -> None:
        payload = json.loads(charts.figure_json(charts.quota_bars([])))
        assert [(t["name"], t["x"], t["y"]) for t in payload["data"]] == [
            ("reserved", [], []),
            ("nominal", [], []),
            ("borrowable", [], []),
        ]
