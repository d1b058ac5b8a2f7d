"""The usage ledger does not depend on the rate window: the same engine counters, stored by the
direct path with a window of one cycle (a rate between two scrapes, as before the rate window) or
of several, give the same token totals, raw and after the rollups (usage.rollup reads
rate × interval_s; runtime.exposition.window.rescaled makes each point stand for its cycle)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from deployments.models import ModelDeployment
from metrics.models import MetricSample, Resolution
from metrics.store import downsample, new_sample
from runtime.exposition.parse import parse_exposition
from runtime.exposition.window import advance
from tests.support.shared import shared_path
from usage.rollup import token_days

CYCLE = 15.0
START = datetime(2026, 11, 12, 10, 0, tzinfo=UTC)
END = datetime(2026, 11, 13, 0, 0, tzinfo=UTC)


def served_series(dep: ModelDeployment, window_s: float) -> tuple[float, float]:
    """Store the real vLLM series (a burst, then idle) one scrape per cycle; returns the prompt and
    generated tokens its counters grew by."""
    paths = sorted(shared_path("fixtures", "metrics", "series-vllm-0.32-cpu").glob("*.prom"))
    snaps = [parse_exposition(p.read_text(), timestamp=START.timestamp() + i * CYCLE) for i, p in enumerate(paths)]
    history, prev, samples = [], None, []
    for snap in snaps:
        point, history = advance(history, prev, snap, window_s=window_s)
        samples.append(new_sample(dep.pk, point))
        prev = snap
    MetricSample.objects.bulk_create(samples)
    first, last = snaps[0], snaps[-1]
    return (
        last.counter("prompt_tokens_total") - first.counter("prompt_tokens_total"),
        last.counter("generation_tokens_total") - first.counter("generation_tokens_total"),
    )


def totals(dep: ModelDeployment) -> tuple[float, float]:
    days = token_days(dep.pk, START, END)
    return sum(p for p, _ in days.values()), sum(g for _, g in days.values())


@pytest.mark.django_db
class TestTokensWhateverTheWindow:
    def test_one_cycle_or_a_window_of_several_count_the_same_tokens(self, world):
        deps = {
            window: ModelDeployment.objects.create(
                tenant=world.alpha,
                name=f"w{int(window)}",
                model_source="m",
                served_model_name=f"w{int(window)}",
                flavor=world.h100,
                state="ready",
            )
            for window in (CYCLE, 60.0, 120.0)
        }
        grown = {window: served_series(dep, window) for window, dep in deps.items()}
        assert len(set(grown.values())) == 1
        prompt, generation = grown[CYCLE]
        assert (prompt, generation) == (5140.0, 9090.0)  # the burst of 60 requests
        for dep in deps.values():
            assert totals(dep) == pytest.approx((prompt, generation))
        # The charts differ: the longer window spreads the burst's rate over its length.
        peaks = {
            window: max(s.generation_tokens_per_s or 0 for s in MetricSample.objects.filter(deployment=dep))
            for window, dep in deps.items()
        }
        assert peaks[CYCLE] > peaks[60.0]
        # Rolled up to minutes and ten minutes (usage reads the rollups first): still the same.
        downsample(now=datetime(2026, 11, 12, 10, 30, tzinfo=UTC))
        assert MetricSample.objects.filter(resolution=Resolution.TEN_MINUTES).exists()
        for dep in deps.values():
            assert totals(dep) == pytest.approx((prompt, generation))
