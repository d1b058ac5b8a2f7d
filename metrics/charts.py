"""Plotly figure builders for the deployment dashboards and quota pages. Pure: no ORM, no I/O.

Every builder takes the x values (unix seconds or datetimes) and a mapping of series name →
values (the :class:`runtime.exposition.MetricPoint` / ``MetricSample`` field names; None is a
gap, drawn as a break in the line rather than a fake zero) and returns a
``plotly.graph_objects.Figure``. Pages embed :func:`figure_json` and render it with the
locally served plotly.js, so nothing here refers to a CDN.

Each title says what a point covers: rates and latency quantiles the rate window (`window_s`,
metrics.collect.rate_window_s), gauges the instant of each scrape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from runtime.tasks import CHAT, generates

__all__ = [
    "CHARTS",
    "GENERATION_CHARTS",
    "GENERATION_SERIES",
    "QuotaRow",
    "chart_names",
    "dashboard",
    "decode_chart",
    "e2e_chart",
    "figure_json",
    "itl_chart",
    "kv_cache_chart",
    "preemptions_chart",
    "prefill_chart",
    "prefix_cache_chart",
    "prompt_tokens_chart",
    "queue_chart",
    "queue_time_chart",
    "quota_bars",
    "rejections_chart",
    "replicas_chart",
    "request_rate_chart",
    "shown_series",
    "tokens_chart",
    "ttft_chart",
    "waiting_reasons_chart",
]

Timestamps = Sequence[float | datetime]
Series = Mapping[str, Sequence[float | None]]
Window = float | None  # the rate window in seconds; None: not said


def _over(title: str, window_s: Window) -> str:
    """A rate or quantile chart's title with the window each point covers."""
    if window_s is None:
        return title
    seconds = round(window_s)
    span = f"{seconds // 60} min" if seconds >= 120 and seconds % 60 == 0 else f"{seconds:g} s"
    return f"{title} · over {span}"


def _sampled(title: str, window_s: Window) -> str:
    """A gauge chart's title: each point is one reading, no window."""
    return title if window_s is None else f"{title} · at each scrape"


# One palette everywhere so "p95" or "waiting" is the same colour on every chart.
COLOURS = {
    "primary": "#1f77b4",
    "secondary": "#ff7f0e",
    "bad": "#d62728",
    "good": "#2ca02c",
    "muted": "#7f7f7f",
}


def _x(timestamps: Timestamps) -> list[datetime]:
    """Datetimes in UTC: Plotly then draws a time axis and the browser shows real times."""
    return [t.astimezone(UTC) if isinstance(t, datetime) else datetime.fromtimestamp(t, UTC) for t in timestamps]


Span = tuple[float | datetime, float | datetime] | None  # the window drawn, (start, end)


def _isolated(y: Sequence[float | None]) -> bool:
    """Whether some value has no neighbour to draw a line to (a lone point would be invisible)."""
    for i, value in enumerate(y):
        if value is None:
            continue
        before = i > 0 and y[i - 1] is not None
        after = i + 1 < len(y) and y[i + 1] is not None
        if not (before or after):
            return True
    return False


# The one axis style of every figure: labels stay horizontal (Plotly tilts them by 30 degrees
# on its own wherever they would touch, so crowded charts looked unlike the rest), few enough
# ticks that they never touch, and margins that grow to fit them.
AXIS = {"tickangle": 0, "automargin": True}
TIME_AXIS = {**AXIS, "type": "date", "nticks": 6}


def _styled(fig: go.Figure, title: str, *, height: int, x: dict, y: dict, **layout: Any) -> go.Figure:
    """Every figure's look, in one place: title, template, margins, legend and axes."""
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        template="plotly_white",
        height=height,
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0},
        xaxis=x,
        yaxis={**AXIS, "rangemode": "tozero", **y},
        **layout,
    )
    return fig


def _figure(title: str, y_title: str, *, percent: bool = False) -> go.Figure:
    fig = _styled(
        go.Figure(),
        title,
        height=280,
        x={**TIME_AXIS, "title": {"text": "Time (UTC)"}},
        y={"title": {"text": y_title}},
        hovermode="x unified",
    )
    if percent:
        fig.update_yaxes(range=[0, 100])
    return fig


# Drawn only where the series has values: a peak exists for rollups (metrics.aggregate.PEAKS),
# Ray Serve's replica counts where Ray Serve reports them (a chart left with no trace is not
# shown: static/portal/dashboard.js).
# What older engines do not export (waiting by reason: vLLM 0.2x) is optional too.
OPTIONAL = frozenset(
    {"running_peak", "kv_cache_pct_peak", "replicas_running", "replicas_target", "waiting_capacity", "waiting_deferred"}
)
DASHED = frozenset({"running_peak", "kv_cache_pct_peak", "replicas_target"})


def _lines(
    title: str,
    y_title: str,
    timestamps: Timestamps,
    series: Series,
    traces: Sequence[tuple[str, str, str]],
    *,
    percent: bool = False,
    fill: bool = False,
    span: Span = None,
) -> go.Figure:
    """A line chart of ``traces`` = (series key, legend name, colour key).

    A value with no neighbour (a one-point series, or a point between gaps) is drawn as a
    marker: a line needs two points. The x axis spans the window (`span`) when given, so one
    point sits where it belongs in time instead of filling an axis of a few milliseconds; a
    series of only zeros gets a y axis of 0-1 instead of Plotly's -1..1. A series in
    :data:`OPTIONAL` without a value is left out (no empty legend entry).
    """
    fig = _figure(title, y_title, percent=percent)
    x = _x(timestamps)
    present: list[float] = []
    for key, name, colour in traces:
        y = list(series.get(key, [None] * len(x)))
        if len(y) != len(x):
            raise ValueError(f"series {key!r} has {len(y)} values for {len(x)} timestamps")
        if key in OPTIONAL and all(v is None for v in y):
            continue
        present += [v for v in y if v is not None]
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                name=name,
                mode="lines+markers" if _isolated(y) else "lines",
                marker={"size": 7, "color": COLOURS[colour]},
                line={"color": COLOURS[colour], "width": 2, "dash": "dot" if key in DASHED else "solid"},
                fill="tozeroy" if fill and key not in DASHED else None,
                connectgaps=False,
            )
        )
    if span is not None:
        fig.update_xaxes(range=_x(span))
    if not percent and present and max(present) <= 0 and min(present) >= 0:
        fig.update_yaxes(range=[0, 1])
    return fig


def tokens_chart(timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None) -> go.Figure:
    """Throughput: prompt (prefill) and generated tokens per second."""
    return _lines(
        _over("Throughput", window_s),
        "tokens/s",
        timestamps,
        series,
        [
            ("prompt_tokens_per_s", "prompt", "secondary"),
            ("generation_tokens_per_s", "generation", "primary"),
        ],
        span=span,
    )


def prompt_tokens_chart(
    timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None
) -> go.Figure:
    """Throughput of a deployment that generates nothing (embedding, score): prompt tokens per second."""
    return _lines(
        _over("Prompt throughput", window_s),
        "tokens/s",
        timestamps,
        series,
        [("prompt_tokens_per_s", "prompt", "secondary")],
        span=span,
    )


def kv_cache_chart(timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None) -> go.Figure:
    """KV-cache use, 0-100 % (mean over replicas); on rollups also the highest sample of each
    interval ("peak"), which the mean flattens."""
    return _lines(
        _sampled("KV-cache use", window_s),
        "%",
        timestamps,
        series,
        [("kv_cache_pct", "KV cache", "primary"), ("kv_cache_pct_peak", "KV cache, peak", "primary")],
        percent=True,
        fill=True,
        span=span,
    )


def queue_chart(timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None) -> go.Figure:
    """Requests running in the batch vs waiting in the queue; on rollups also the highest
    running sample of each interval ("peak"), which the mean flattens."""
    return _lines(
        _sampled("Running vs waiting requests", window_s),
        "requests",
        timestamps,
        series,
        [
            ("running", "running", "primary"),
            ("running_peak", "running, peak", "primary"),
            ("waiting", "waiting", "bad"),
        ],
        span=span,
    )


def replicas_chart(timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None) -> go.Figure:
    """Ray Serve's replicas of the model: healthy ones against the autoscaler's target."""
    return _lines(
        _sampled("Replicas", window_s),
        "replicas",
        timestamps,
        series,
        [("replicas_running", "running", "primary"), ("replicas_target", "target", "muted")],
        span=span,
    )


def _quantiles(
    title: str, prefix: str, timestamps: Timestamps, series: Series, span: Span, window_s: Window
) -> go.Figure:
    return _lines(
        _over(title, window_s),
        "seconds",
        timestamps,
        series,
        [(f"{prefix}_p50", "p50", "primary"), (f"{prefix}_p95", "p95", "secondary")],
        span=span,
    )


def ttft_chart(timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None) -> go.Figure:
    """Time to first token, p50 and p95 per window."""
    return _quantiles("Time to first token", "ttft", timestamps, series, span, window_s)


def itl_chart(timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None) -> go.Figure:
    """Inter-token latency, p50 and p95 per window."""
    return _quantiles("Inter-token latency", "itl", timestamps, series, span, window_s)


def e2e_chart(timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None) -> go.Figure:
    """End-to-end request latency, p50 and p95 per window."""
    return _quantiles("End-to-end latency", "e2e", timestamps, series, span, window_s)


def queue_time_chart(
    timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None
) -> go.Figure:
    """Time requests waited in the queue before their prefill began, p50 and p95 per window
    (over the requests that finished in it: vLLM observes a request's phases at its end)."""
    return _quantiles("Queue time", "queue", timestamps, series, span, window_s)


def prefill_chart(timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None) -> go.Figure:
    """Time requests spent in prefill (their prompt), p50 and p95 per window."""
    return _quantiles("Prefill time", "prefill", timestamps, series, span, window_s)


def decode_chart(timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None) -> go.Figure:
    """Time requests spent decoding (their output), p50 and p95 per window."""
    return _quantiles("Decode time", "decode", timestamps, series, span, window_s)


def waiting_reasons_chart(
    timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None
) -> go.Figure:
    """Requests waiting, by why: for scheduling capacity (batch or KV cache full), or deferred
    by a transient constraint (LoRA budget, KV transfer). Engines before vLLM 0.30 report neither."""
    return _lines(
        _sampled("Waiting requests, by reason", window_s),
        "requests",
        timestamps,
        series,
        [("waiting_capacity", "capacity", "bad"), ("waiting_deferred", "deferred", "secondary")],
        span=span,
    )


def rejections_chart(
    timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None
) -> go.Figure:
    """Requests refused at admission per second (HTTP 503 before queueing), by the queue limit
    they hit: --max-num-queued-reqs or --max-num-queued-tokens."""
    return _lines(
        _over("Admission rejections", window_s),
        "rejections/s",
        timestamps,
        series,
        [
            ("rejected_queued_reqs_per_s", "request limit", "bad"),
            ("rejected_queued_tokens_per_s", "token limit", "secondary"),
        ],
        span=span,
    )


def prefix_cache_chart(
    timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None
) -> go.Figure:
    """Prefix-cache hits over lookups, 0-100 %: per rate window, and accumulated over the chart's span
    (every hit so far over every lookup so far: ratios of sums, metrics.aggregate)."""
    return _lines(
        _over("Prefix-cache hit rate", window_s),
        "%",
        timestamps,
        series,
        [("prefix_cache_hit_pct", "per window", "good"), ("prefix_cache_hit_pct_cumulative", "cumulative", "muted")],
        percent=True,
        span=span,
    )


def preemptions_chart(
    timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None
) -> go.Figure:
    """Preemptions per second (requests evicted from the KV cache and recomputed)."""
    return _lines(
        _over("Preemptions", window_s),
        "preemptions/s",
        timestamps,
        series,
        [("preemptions_per_s", "preemptions", "bad")],
        span=span,
    )


def request_rate_chart(
    timestamps: Timestamps, series: Series, *, span: Span = None, window_s: Window = None
) -> go.Figure:
    """Finished requests per second, and those that ended abnormally (abort/error)."""
    return _lines(
        _over("Requests", window_s),
        "requests/s",
        timestamps,
        series,
        [("requests_per_s", "finished", "primary"), ("errors_per_s", "errors", "bad")],
        span=span,
    )


# Dashboard order: what a user checks first comes first.
CHARTS = {
    "tokens": tokens_chart,
    "requests": request_rate_chart,
    "queue": queue_chart,
    "queue_time": queue_time_chart,
    "waiting_reasons": waiting_reasons_chart,
    "rejections": rejections_chart,
    "kv_cache": kv_cache_chart,
    "replicas": replicas_chart,
    "ttft": ttft_chart,
    "prefill": prefill_chart,
    "decode": decode_chart,
    "itl": itl_chart,
    "e2e": e2e_chart,
    "prefix_cache": prefix_cache_chart,
    "preemptions": preemptions_chart,
}


# What vLLM's pooling runner (embedding, score: runtime.tasks) never reports, read in vLLM 0.32
# (vllm/v1/core/sched/scheduler.py, update_from_output: "Pooling stops as soon as there is output",
# so a pooling request has one engine output, in its prefill step, and finishes with it;
# vllm/v1/metrics/stats.py, IterationStats.update_from_output / update_from_finished_request;
# vllm/v1/metrics/loggers.py, PrometheusStatLogger.record): no generated tokens (the counter grows
# by 0); no inter-token latency (observed only for outputs after the prefill one); a decode time
# and time per output token of 0 for every request (last token = first token); and a "time to
# first token" taken at the same iteration as the end-to-end latency, so the same number. Prompt
# tokens, queue and prefill times, end-to-end latency, the queue gauges, KV cache, prefix cache
# (causal models with last-token pooling: ModelConfig.is_prefix_caching_supported) and
# preemptions apply as for a generating model.
GENERATION_CHARTS = frozenset({"ttft", "decode", "itl"})
GENERATION_SERIES = frozenset(
    {"generation_tokens_per_s", "ttft_p50", "ttft_p95", "itl_p50", "itl_p95", "decode_p50", "decode_p95"}
)


def _charts(task: str) -> dict[str, Any]:
    """The dashboard's builders for a deployment serving `task`: all of :data:`CHARTS` for a
    generating one; without the generation charts, and prompt tokens only, for a pooling one. The
    keys stay those of :data:`CHARTS` (advice links to "#chart-tokens" on either)."""
    if generates(task):
        return CHARTS
    pooling = {key: build for key, build in CHARTS.items() if key not in GENERATION_CHARTS}
    return pooling | {"tokens": prompt_tokens_chart}


def chart_names(task: str) -> list[str]:
    """The chart keys a deployment serving `task` shows, in dashboard order."""
    return list(_charts(task))


def shown_series(task: str, series: Mapping[str, Any]) -> dict[str, Any]:
    """`series` (or a summary's values) without what `task` never reports (:data:`GENERATION_SERIES`
    for a pooling task), so the API says what the dashboard draws."""
    return dict(series) if generates(task) else {k: v for k, v in series.items() if k not in GENERATION_SERIES}


def dashboard(
    timestamps: Timestamps,
    series: Series,
    *,
    span: Span = None,
    window_s: Window = None,
    task: str = CHAT,
) -> dict[str, go.Figure]:
    """The deployment charts of a deployment serving `task`, keyed as in :data:`CHARTS`, over the
    time span `span`; each title says the rate window `window_s` its rates and quantiles cover."""
    return {key: build(timestamps, series, span=span, window_s=window_s) for key, build in _charts(task).items()}


@dataclass(frozen=True)
class QuotaRow:
    """One bar group: a flavor (or ``tenant / flavor`` on the admin page) and its GPUs."""

    label: str
    reserved: int  # held by approved deployments
    nominal: int  # guaranteed
    borrowable: int  # borrowing limit: extra from the cohort, reclaimable by preemption


def quota_bars(rows: Sequence[QuotaRow | Mapping[str, Any]], title: str = "GPU quota") -> go.Figure:
    """Grouped bars per flavor: reserved vs nominal vs borrowable GPUs."""
    items = [r if isinstance(r, QuotaRow) else QuotaRow(**r) for r in rows]
    # "tenant / flavor" on two lines: horizontal labels that fit a narrow chart.
    labels = [r.label.replace(" / ", "<br>") for r in items]
    fig = go.Figure()
    for attr, name, colour in (
        ("reserved", "reserved", "primary"),
        ("nominal", "nominal", "muted"),
        ("borrowable", "borrowable", "secondary"),
    ):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[getattr(r, attr) for r in items],
                name=name,
                marker_color=COLOURS[colour],
                text=[getattr(r, attr) for r in items],
                textposition="auto",
            )
        )
    return _styled(
        fig,
        title,
        height=300,
        x={**AXIS, "title": {"text": "GPU flavor"}},
        y={"title": {"text": "GPUs"}, "dtick": 1 if _small(items) else None},
        barmode="group",
    )


def _small(items: Sequence[QuotaRow]) -> bool:
    """Whole-GPU ticks while the numbers are small; Plotly picks ticks for large ones."""
    return max((max(r.reserved, r.nominal, r.borrowable) for r in items), default=0) <= 16


def figure_json(fig: go.Figure) -> str:
    """The figure as JSON for ``Plotly.newPlot`` (no HTML, no CDN script tag)."""
    return pio.to_json(fig, validate=False, pretty=False)
