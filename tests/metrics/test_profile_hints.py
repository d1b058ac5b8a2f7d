"""The advisor names the serving-profile change that addresses each piece of advice
(metrics.profile_hints), judged against the profile the deployment was filled from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from metrics.advice import advice_for
from metrics.advisor import advise
from metrics.models import MetricSample
from metrics.profile_hints import profile_hint, with_profile_hints
from runtime.exposition.derive import MetricPoint
from tests.support.factories import draft

T0 = 1_796_003_900.0


def slow_first_tokens() -> list[MetricPoint]:
    """Fifteen minutes of a p95 first token of 4 s with nothing queued."""
    return [
        MetricPoint(timestamp=T0 + m * 60, interval_s=60.0, ttft_p95=4.0, waiting=0.0, running=3.0) for m in range(15)
    ]


class TestWhichProfile:
    @pytest.mark.parametrize(
        "code, current, suggested",
        [
            ("slow_first_token", "throughput", "latency"),
            ("slow_first_token", "", "latency"),
            ("slow_first_token", "cost", "latency"),
            ("scale_out", "throughput", "latency"),
            ("scale_out", "cost", "throughput"),
            ("kv_cache_pressure", "latency", "throughput"),
            ("idle", "throughput", "cost"),
            ("idle", "", "cost"),
        ],
    )
    def test_the_profile_each_advice_points_to(self, code, current, suggested):
        target, sentence = profile_hint(code, current, scale_to_zero=True)
        assert target == suggested
        assert f"the {suggested} profile" in sentence or f"The {suggested} serving profile" in sentence

    @pytest.mark.parametrize(
        "code, current",
        [
            ("slow_first_token", "latency"),
            ("scale_out", "latency"),
            ("kv_cache_pressure", "throughput"),
            ("idle", "cost"),
        ],
    )
    def test_no_hint_for_the_profile_it_already_has(self, code, current):
        assert profile_hint(code, current, scale_to_zero=True) is None

    def test_an_advice_without_a_profile_answer_gets_none(self):
        assert profile_hint("something_new", "", scale_to_zero=True) is None

    def test_idle_says_scale_to_zero_only_where_the_backend_can(self):
        assert "scale to zero" in profile_hint("idle", "", scale_to_zero=True)[1]
        local = profile_hint("idle", "", scale_to_zero=False)[1]
        assert "scale to zero" not in local and "one replica" in local

    def test_slow_first_tokens_on_a_throughput_profile_name_the_latency_profile(self):
        (plain,) = advise(slow_first_tokens(), quota_headroom_gpus=8, gpus_per_replica=1, now=T0 + 15 * 60)
        assert plain.code == "slow_first_token" and plain.profile == ""
        (hinted,) = with_profile_hints([plain], current="throughput", scale_to_zero=True)
        assert hinted.profile == "latency"
        assert hinted.message.startswith(plain.message)
        assert "Switch from the throughput profile to the latency profile (tensor parallelism" in hinted.message
        assert with_profile_hints([plain], current="latency", scale_to_zero=True) == [plain]


@pytest.fixture
def serving(world):
    from deployments import services

    def make(**overrides):
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, **overrides))
        type(dep).objects.filter(pk=dep.pk).update(state="ready")
        dep.refresh_from_db()
        return dep

    return make


class TestOnStoredPoints:
    def test_the_api_advice_names_the_latency_profile_for_a_throughput_deployment(self, world, serving):
        dep = serving(serving_profile="throughput")
        now = datetime.now(UTC)
        MetricSample.objects.bulk_create(
            [
                MetricSample(deployment=dep, ts=now - timedelta(seconds=15 * i), interval_s=15.0, ttft_p95=4.0)
                for i in range(20)
            ]
        )
        (advice,) = world.client("viewer").get(f"/api/v1/deployments/{dep.pk}/advice/").json()
        assert advice["code"] == "slow_first_token" and advice["profile"] == "latency"
        assert "latency profile" in advice["message"]
        page = world.browser("viewer").get(f"/deployments/{dep.pk}/status/").content.decode()
        assert 'data-advice="slow_first_token" data-profile="latency"' in page

    @pytest.mark.parametrize("backend, words", [("kuberay", "scale to zero"), ("local", "one replica")])
    def test_an_idle_custom_deployment_is_pointed_at_the_cost_profile(self, world, serving, backend, words):
        dep = serving(backend=backend, model_source="Qwen/Qwen2.5-7B-Instruct", max_replicas=1)
        now = datetime.now(UTC)
        MetricSample.objects.bulk_create(
            [
                MetricSample(
                    deployment=dep,
                    ts=now - timedelta(seconds=200 * i),
                    interval_s=200.0,
                    running=0.0,
                    waiting=0.0,
                    generation_tokens_per_s=0.0,
                )
                for i in range(38)
            ]
        )
        (advice,) = advice_for(dep)
        assert advice.code == "idle" and advice.profile == "cost"
        assert f"The cost serving profile sets this up ({words}" in advice.message
