"""The Prometheus path against a real Prometheus (Debian's binary, tests/support/prometheus.py).

Prometheus scrapes stand-in engines every second: the real vLLM series replayed with advancing
counters, the real Ray Serve LLM capture and the saturated vLLM capture growing steadily, and the
series played once and then held (an engine gone idle). The portal's fleet queries must give the
numbers the direct-scrape path computes from the very expositions Prometheus stored (found
through the ``standin_scrape_index`` each one carries), at a fixed number of queries per cycle:
over a plain 4 s window, and at the production rule (runtime.exposition.window.rate_window for a
1 s scrape interval and this test's cycle), where an idle engine must read 0 on both paths.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from dataclasses import fields

import pytest

from metrics.collect import collect
from metrics.models import MetricSample, ScrapeState
from runtime.exposition.derive import Interval, MetricPoint, derive
from runtime.exposition.parse import parse_exposition
from runtime.exposition.promql import QUERY_COUNT, fleet_points
from runtime.exposition.snapshot import COUNTERS, GAUGES, HISTOGRAMS
from runtime.exposition.window import advance, rate_window
from tests.support.factories import draft
from tests.support.prometheus import Prometheus, Replay, StandIn, Target, require_prometheus, running
from tests.support.shared import shared_path

NAMESPACE = "alpha"  # the world's tenant alpha
WINDOW_S = 4.0  # four scrape intervals
SCRAPE_S = 1.0  # Prometheus's scrape interval here
CYCLE_S = 4  # the portal's cycle here (METRICS_SCRAPE_SECONDS)
PRODUCTION_WINDOW_S = rate_window(CYCLE_S, SCRAPE_S)  # what the portal uses at these settings: 5 s
# target name → (served model name, fixture file or series folder)
# A reviewer's held-out series (a folder of NN_<unix-ts>.prom files) replaces the captured one
# with METRICS_HELD_OUT_SERIES=/path/to/folder.
TARGETS = {
    "series": ("tiny-series", os.environ.get("METRICS_HELD_OUT_SERIES") or "series-vllm-0.32-cpu"),
    "ray": ("tiny-ray", "ray-serve-llm-vllm-0.32-cpu.prom"),
    "busy": ("tiny-busy", "vllm-0.32-cpu-openai-server-under-load.prom"),
}
# The series once, then its last exposition for good: counters that stop moving.
HELD = {"held": ("tiny-held", TARGETS["series"][1])}
# Compared on both paths: every figure a point shows (ratio parts are compared as ratios: the
# stored increments cover different spans by design, see runtime.exposition.promql.rescaled).
FIGURES = [f.name for f in fields(MetricPoint) if f.name not in ("timestamp", "interval_s")]
FIGURES = [n for n in FIGURES if n not in ("prefix_cache_hits", "prefix_cache_queries")]
FIGURES = [n for n in FIGURES if n not in ("requests_finished", "requests_failed")]


def _texts(source: str) -> list[str]:
    path = shared_path("fixtures", "metrics", source)
    return [p.read_text() for p in sorted(path.glob("*.prom"))] if path.is_dir() else [path.read_text()]


@pytest.fixture(scope="module")
def stand_in() -> Iterator[StandIn]:
    require_prometheus()
    targets = [
        Target(
            name,
            # Ray Serve names the engine's deployment after the model id, which is the model_name.
            Replay(
                [t.replace('deployment="LLMServer:tiny"', f'deployment="LLMServer:{model}"') for t in _texts(source)],
                relabel={"model_name": model},
                hold=name in HELD,
            ),
            {"namespace": NAMESPACE, "target": name},
        )
        for name, (model, source) in {**TARGETS, **HELD}.items()
    ]
    # Each target starts one loop in (StandIn): every counter that moves is then well above zero,
    # so Prometheus's extrapolation is never clamped at a counter's zero (runtime.exposition.promql).
    server = StandIn(targets)
    yield server
    server.close()


@pytest.fixture(scope="module")
def prometheus(stand_in: StandIn) -> Iterator[Prometheus]:
    with running(stand_in, interval_s=SCRAPE_S) as prom:
        # 28 s of scrapes of every target: more than the 14 windows below reach back (22 s), and
        # enough for the held series to have stood still for a few windows.
        scrapes = max(28, held_still(stand_in) + math.ceil(PRODUCTION_WINDOW_S) + 8)
        prom.wait_for(
            "count_over_time(standin_scrape_index[10m])",
            lambda r: len(r) == len(TARGETS) + len(HELD) and all(float(i["value"][1]) >= scrapes for i in r),
            timeout=90 + scrapes,
        )
        yield prom


def held_still(stand_in: StandIn) -> int:
    """The scrape index from which the held target's counters no longer move."""
    replay = stand_in.targets["held"].replay
    counters = [parse_exposition(replay.text(k)).counter_totals for k in range(len(replay.parsed))]
    moved = [k for k in range(1, len(counters)) if counters[k] != counters[k - 1]]
    return max(moved, default=0)


def scrapes_in_window(prom: Prometheus, at: float, window_s: float) -> dict[str, list[tuple[float, int]]]:
    """Per target, (time, index) of every exposition Prometheus holds in the window before `at`;
    the direct path differences the first and the last."""
    return {
        item["metric"]["target"]: [(float(t), int(float(k))) for t, k in item["values"]]
        for item in prom.query(f"standin_scrape_index[{int(window_s * 1000)}ms]", at=at)
    }


def evenly_covered(samples: list[tuple[float, int]], at: float, window_s: float) -> bool:
    """Whether rate() extrapolates this window fully to both edges (Prometheus does when each
    edge is within 1.1 average scrape intervals of a sample): then it equals the plain
    difference quotient. A scrape delayed on a loaded machine can break that; such a window
    says nothing about the portal, so the test moves its evaluation time instead."""
    if len(samples) < 3:
        return False
    first, last = samples[0][0], samples[-1][0]
    average = (last - first) / (len(samples) - 1)
    return first - (at - window_s) < 1.1 * average and at - last < 1.1 * average


def fair_time(
    prom: Prometheus, at: float, window_s: float = WINDOW_S, names: frozenset[str] = frozenset(TARGETS)
) -> tuple[float, dict]:
    """`at`, or the nearest earlier time (10 ms steps) at which the window of every target in
    `names` is evenly covered."""
    for step in range(100):
        when = at - 0.01 * step
        windows = {k: v for k, v in scrapes_in_window(prom, when, window_s).items() if k in names}
        if len(windows) == len(names) and all(evenly_covered(w, when, window_s) for w in windows.values()):
            return when, windows
    raise AssertionError(f"no evenly covered window near {at}: {windows}")


def direct(stand_in: StandIn, name: str, samples: list[tuple[float, int]]) -> MetricPoint:
    """The direct-scrape path's point from the first and last exposition, at Prometheus's times."""
    (t0, k0), (t1, k1) = samples[0], samples[-1]
    return derive(parse_exposition(stand_in.text(name, k0), t0), parse_exposition(stand_in.text(name, k1), t1))


def windowed(stand_in: StandIn, name: str, samples: list[tuple[float, int]], window_s: float) -> MetricPoint:
    """The direct path at the production rule (runtime.exposition.window.advance, as
    metrics.collect runs it every cycle) over the expositions Prometheus stored in its window,
    read at Prometheus's times: every one a snapshot, every step an interval kept."""
    history: list[Interval] = []
    prev, point = None, None
    for t, k in samples:
        cur = parse_exposition(stand_in.text(name, k), t)
        point, history = advance(history, prev, cur, window_s=window_s)
        prev = cur
    assert point is not None and len(history) == len(samples) - 1  # the whole window, no more
    return point


def assert_same(a: MetricPoint, b: MetricPoint, what: str, *, rel: float = 1e-6) -> None:
    """Every figure equal: by default to Prometheus's time rounding (its times are whole
    milliseconds, int64; as unix seconds in a float they carry ~1e-7 s, ~3e-8 of a 3 s
    interval: hence rel=1e-6, not exact)."""
    for name in (*FIGURES, "prefix_cache_hit_pct"):
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            assert x is None and y is None, f"{what}: {name} {x} vs {y}"
        else:
            assert x == pytest.approx(y, rel=rel, abs=1e-9), f"{what}: {name} {x} vs {y}"
    if a.requests_finished:
        fa, fb = a.requests_failed / a.requests_finished, b.requests_failed / b.requests_finished
        assert fa == pytest.approx(fb, rel=rel, abs=1e-12), what


@pytest.mark.django_db
class TestAgainstARealPrometheus:
    def test_fleet_queries_give_the_direct_paths_numbers_from_the_same_expositions(self, prometheus, stand_in):
        now = time.time()
        checked = 0
        moving = set()
        for j in range(14):  # windows sliding back over the last ~18 s: the burst, the idle, the wrap
            at, windows = fair_time(prometheus, now - 0.3 - 1.3 * j)
            points = fleet_points(prometheus.url, window_s=WINDOW_S, at=at)
            for name, (model, _) in TARGETS.items():
                expected = direct(stand_in, name, windows[name])
                assert_same(points[(NAMESPACE, model)], expected, f"{name} at {at}: {windows[name]}")
                checked += 1
                if expected.generation_tokens_per_s:
                    moving.add(name)
        assert checked == 14 * len(TARGETS)
        assert moving == set(TARGETS)  # the comparison saw tokens flowing on every target

    def test_at_the_production_window_both_paths_agree_and_an_idle_engine_reads_zero(self, prometheus, stand_in):
        """Issue 39's check: a real vLLM series replayed into both paths at the production rule
        gives the same figures (within 2 %; in fact to Prometheus's time rounding), and an engine
        whose counters stopped reads 0 on both paths one window later."""
        window = PRODUCTION_WINDOW_S
        every = {**TARGETS, **HELD}
        names = frozenset(every)
        held = scrapes_in_window(prometheus, time.time(), 600.0)["held"]
        still = held_still(stand_in)  # from this scrape on, the held engine's counters stand still
        still_at = next(t for t, k in held if k == still)
        moving, idle = set(), 0
        at, end = held[0][0] + window + 1.0, time.time() - 0.3  # from its first full window, in its burst
        while at < end:
            when, windows = fair_time(prometheus, at, window, names)
            points = fleet_points(prometheus.url, window_s=window, at=when)
            for name, (model, _) in every.items():
                expected = windowed(stand_in, name, windows[name], window)
                assert_same(points[(NAMESPACE, model)], expected, f"{name} at {when}: {windows[name]}", rel=0.02)
                if expected.generation_tokens_per_s:
                    moving.add(name)
            if min(k for _, k in windows["held"]) >= still:
                for point in (
                    points[(NAMESPACE, HELD["held"][0])],
                    windowed(stand_in, "held", windows["held"], window),
                ):
                    assert (point.generation_tokens_per_s, point.prompt_tokens_per_s, point.requests_per_s) == (0, 0, 0)
                idle += 1
            at += 1.3
        # Seen busy on every looping target (the held one too, unless its burst is shorter than a
        # window), and the held one idle in several windows.
        assert moving >= frozenset(TARGETS) and idle >= 3
        # Within one window: the first window that holds no scrape before the stop reads 0 on both.
        at = still_at + window - 0.05
        samples = scrapes_in_window(prometheus, at, window)["held"]
        assert min(k for _, k in samples) == still  # it reaches back to the first still scrape, no further
        prom_point = fleet_points(prometheus.url, window_s=window, at=at)[(NAMESPACE, HELD["held"][0])]
        for point in (prom_point, windowed(stand_in, "held", samples, window)):
            assert (point.generation_tokens_per_s, point.prompt_tokens_per_s, point.requests_per_s) == (0, 0, 0)
        # …while a window that still holds the last moving scrape counts its tokens on both.
        at = still_at + 0.05
        busy = windowed(stand_in, "held", scrapes_in_window(prometheus, at, window)["held"], window)
        prom_busy = fleet_points(prometheus.url, window_s=window, at=at)[(NAMESPACE, HELD["held"][0])]
        assert busy.generation_tokens_per_s > 0 and prom_busy.generation_tokens_per_s > 0

    def test_a_cycle_stores_those_numbers_for_every_deployment_at_a_fixed_query_count(
        self, prometheus, stand_in, world, settings
    ):
        from deployments import services

        settings.PROMETHEUS_URL = prometheus.url
        # The production rule at this test's settings: a 4 s cycle over 1 s scrapes, 5 s windows.
        settings.METRICS_SCRAPE_SECONDS = CYCLE_S
        settings.PROMETHEUS_SCRAPE_INTERVAL_SECONDS = SCRAPE_S
        every = {**TARGETS, **HELD}
        deps = {}
        for name, (model, _) in every.items():
            data = draft(world, backend="kserve", name=f"d-{name}", served_model_name=model)
            dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=data)
            deps[name] = dep
        lost = services.deployment_create(
            tenant=world.alpha,
            user=world.users["member"],
            data=draft(world, backend="kserve", name="d-lost", served_model_name="nobody-serves-this"),
        )
        assert world.alpha.namespace == NAMESPACE
        type(lost).objects.filter(pk__in=[d.pk for d in (*deps.values(), lost)]).update(state="ready")

        at, windows = fair_time(prometheus, time.time() - 0.3, PRODUCTION_WINDOW_S, frozenset(every))
        before = prometheus.query_requests()
        assert collect(at=at) == len(every)
        assert prometheus.query_requests() - before == QUERY_COUNT  # one fixed set, whatever the fleet
        assert QUERY_COUNT <= len(COUNTERS) + len(GAUGES) + len(HISTOGRAMS)

        for name, dep in deps.items():
            expected = windowed(stand_in, name, windows[name], PRODUCTION_WINDOW_S)
            sample = MetricSample.objects.get(deployment=dep)
            stored = MetricPoint(
                timestamp=at, **{f.name: getattr(sample, f.name) for f in fields(MetricPoint) if f.name != "timestamp"}
            )
            assert_same(stored, expected, name)
            assert sample.interval_s == pytest.approx(CYCLE_S)  # the point stands for one cycle
        # The held engine has stood still for several windows: 0 on the stored point as well.
        idle = MetricSample.objects.get(deployment=deps["held"])
        assert (idle.generation_tokens_per_s, idle.requests_per_s) == (0.0, 0.0)
        state = ScrapeState.objects.get(deployment=lost)
        assert "no vLLM series" in state.last_error and state.last_success is None
        assert not MetricSample.objects.filter(deployment=lost).exists()

    def test_an_unreachable_prometheus_leaves_a_gap_for_every_deployment(self, world, settings):
        from deployments import services

        settings.PROMETHEUS_URL = "http://127.0.0.1:9"
        settings.METRICS_SCRAPE_TIMEOUT_SECONDS = 1
        dep = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, backend="kserve")
        )
        type(dep).objects.filter(pk=dep.pk).update(state="ready")
        assert collect() == 0
        assert "127.0.0.1:9" in ScrapeState.objects.get(deployment=dep).last_error
