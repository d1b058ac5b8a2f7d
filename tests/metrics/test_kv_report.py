"""The KV cache vLLM reports at start (vllm:cache_config_info) beside the portal's estimate: parsed
from the real expositions in ../shared/fixtures/metrics, kept per engine by a scrape cycle that
reads them from a local HTTP endpoint, and shown on the deployment page and in the API."""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from deployments import sizing
from metrics.collect import collect_all
from metrics.kv_report import ABOVE, BELOW, FIXED, kv_comparison
from metrics.models import ScrapeState
from runtime.exposition.parse import filter_exposition, parse_exposition
from runtime.exposition.snapshot import Snapshot
from tests.metrics.test_collect import Exposition, make_ready
from tests.support.factories import draft
from tests.support.shared import shared_path

AFTER_LOAD = "vllm-0.32-cpu-openai-server-after-load.prom"
RAY = "ray-serve-llm-vllm-0.32-cpu.prom"
INFO = re.compile(r"^vllm:cache_config_info\{.*$", re.M)


def fixture(name: str) -> str:
    return shared_path("fixtures", "metrics", name).read_text()


def with_tokens(text: str, tokens: int) -> str:
    """The real exposition with the engine's stated capacity changed to `tokens`."""
    changed = text.replace('kv_cache_size_tokens="768"', f'kv_cache_size_tokens="{tokens}"')
    assert changed != text
    return changed


def two_engines(text: str, tokens: tuple[int, int]) -> str:
    """The real exposition with its info line twice, as a data-parallel server's two engines state it."""
    line = INFO.search(text).group(0)
    lines = [
        line.replace('engine="0"', f'engine="{i}"').replace('kv_cache_size_tokens="768"', f'kv_cache_size_tokens="{n}"')
        for i, n in enumerate(tokens)
    ]
    return text.replace(line, "\n".join(lines))


@pytest.fixture
def serving(world):
    from deployments import services

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
    services.deployment_approve(
        deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
    )
    dep.refresh_from_db()
    return dep


def estimate_of(dep) -> int:
    tokens = sizing.deployment_fit(type(dep).objects.get(pk=dep.pk)).kv_tokens
    assert tokens  # Llama 3 8B: the catalog knows its layers and KV heads
    return tokens


def on_gpus(dep) -> None:
    """Back on KubeRay after `make_ready` (the local backend's shape, for the scrape): the report
    compares the kept figure with the GPU estimate (an H100's 72 GiB less the weights), not with
    the local engine's fixed cache."""
    type(dep).objects.filter(pk=dep.pk).update(backend="kuberay")


def page_line(world, dep) -> str:
    page = world.browser("member").get(reverse("deployment-detail", args=[dep.pk]))
    assert page.status_code == 200
    found = re.search(r'<div class="small" id="kv-reported"[^>]*>(.*?)</div>', page.content.decode(), re.S)
    assert found, "the page has no reported-KV line"
    return html.unescape(re.sub(r"<[^>]+>", " ", found.group(1)))


def api_report(world, dep) -> dict:
    answer = world.client("member").get(f"/api/v1/deployments/{dep.pk}/summary/")
    assert answer.status_code == 200
    return answer.json()["kv_cache"]


class TestParse:
    def test_the_cpu_engines_768_tokens_are_read_per_engine(self):
        for name in (AFTER_LOAD, "vllm-0.32-cpu-openai-server-under-load.prom"):
            # --num-gpu-blocks-override 24 --block-size 32, as the fixtures' README records.
            assert parse_exposition(fixture(name)).kv_cache_tokens == {(("engine", "0"),): 768}

    def test_every_exposition_of_the_series_states_it(self):
        folder = shared_path("fixtures", "metrics", "series-vllm-0.32-cpu")
        assert {parse_exposition(p.read_text()).kv_cache_tokens[(("engine", "0"),)] for p in folder.glob("*.prom")} == {
            768
        }

    def test_the_info_line_survives_the_filter_and_other_families_read_as_before(self):
        text = fixture(AFTER_LOAD)
        assert "vllm:cache_config_info{" in filter_exposition(text)
        without = parse_exposition(INFO.sub("", text))
        assert without.kv_cache_tokens == {}
        assert without.counter_totals == parse_exposition(text).counter_totals

    def test_the_captured_ray_exposition_states_none(self):
        assert parse_exposition(fixture(RAY)).kv_cache_tokens == {}

    def test_ray_replicas_on_two_nodes_are_kept_apart_and_survive_storage(self):
        line = INFO.search(fixture(AFTER_LOAD)).group(0)
        parts = []
        for replica, tokens in (("a1", 5000), ("b2", 4800)):
            ray_line = line.replace("vllm:cache_config_info{", f'ray_vllm_cache_config_info{{ReplicaId="{replica}",')
            text = fixture(RAY) + with_tokens(ray_line, tokens) + "\n"
            parts.append(parse_exposition(text))
        merged = Snapshot.merged(parts)
        expected = {(("ReplicaId", "a1"), ("engine", "0")): 5000, (("ReplicaId", "b2"), ("engine", "0")): 4800}
        assert merged.kv_cache_tokens == expected
        assert Snapshot.from_dict(merged.to_dict()).kv_cache_tokens == expected


class TestScrapeCycle:
    def test_a_cycle_keeps_what_the_engine_reported(self, serving):
        make_ready(serving, Exposition([fixture(AFTER_LOAD)]).url)
        collect_all()
        assert ScrapeState.objects.get(deployment=serving).kv_cache == [{"engine": {"engine": "0"}, "tokens": 768}]

    def test_a_restarted_engine_replaces_its_figure_and_one_without_a_cache_leaves_none(self, serving):
        text = fixture(AFTER_LOAD)
        endpoint = Exposition([text, with_tokens(text, 1024), INFO.sub("", text)])
        make_ready(serving, endpoint.url)
        seen = []
        for _ in range(3):
            collect_all()
            seen.append([e["tokens"] for e in ScrapeState.objects.get(deployment=serving).kv_cache])
        assert seen == [[768], [1024], []]

    def test_a_failed_read_keeps_the_last_report(self, serving):
        endpoint = Exposition([fixture(AFTER_LOAD)])
        make_ready(serving, endpoint.url)
        collect_all()
        endpoint.mode = "garbage"
        collect_all()
        state = ScrapeState.objects.get(deployment=serving)
        assert state.last_error and [e["tokens"] for e in state.kv_cache] == [768]


class TestPageAndApi:
    def test_nothing_reported_yet_is_said_on_the_page_and_in_the_api(self, world, serving):
        assert page_line(world, serving).strip() == "vLLM has not reported its KV cache yet."
        report = api_report(world, serving)
        assert report["reported_tokens"] is None and report["engines"] == []
        assert report["estimate_tokens"] == estimate_of(serving)
        assert report["line"] == "vLLM has not reported its KV cache yet."

    def test_far_below_the_estimate_shows_both_numbers_and_why(self, world, serving):
        # The CPU engine's 768 tokens against an H100's estimate: vLLM's figure is far lower.
        make_ready(serving, Exposition([fixture(AFTER_LOAD)]).url)
        collect_all()
        on_gpus(serving)
        estimate = estimate_of(serving)
        pct = round((768 - estimate) / estimate * 100)
        line = f"vLLM reports 768 tokens (estimate {estimate:,}, −{abs(pct)} %)."
        shown = " ".join(page_line(world, serving).split())
        assert shown == f"{line} {BELOW}"
        report = api_report(world, serving)
        assert (report["reported_tokens"], report["estimate_tokens"], report["line"]) == (768, estimate, line)
        assert report["far_off"] is True and report["why"] == BELOW
        assert report["engines"] == [{"engine": {"engine": "0"}, "name": "engine 0", "tokens": 768}]
        assert report["estimate"]["kv_tokens"] == estimate and report["reported_at"]

    def test_within_a_quarter_of_the_estimate_there_is_no_note(self, world, serving):
        estimate = estimate_of(serving)
        make_ready(serving, Exposition([with_tokens(fixture(AFTER_LOAD), round(estimate * 0.9))]).url)
        collect_all()
        on_gpus(serving)
        report = api_report(world, serving)
        assert report["difference_pct"] == pytest.approx(-10.0, abs=0.1) and not report["far_off"]
        assert report["line"] == f"vLLM reports {round(estimate * 0.9):,} tokens (estimate {estimate:,}, −10 %)."
        assert " ".join(page_line(world, serving).split()) == report["line"]

    def test_far_above_the_estimate_names_the_settings_that_size_the_cache(self, world, serving):
        estimate = estimate_of(serving)
        make_ready(serving, Exposition([with_tokens(fixture(AFTER_LOAD), estimate * 2)]).url)
        collect_all()
        on_gpus(serving)
        report = api_report(world, serving)
        assert report["line"].endswith("+100 %).") and report["why"] == ABOVE
        assert ABOVE in page_line(world, serving)

    def test_on_the_local_engine_the_fixed_cache_is_the_estimate_and_a_gap_names_other_settings(
        self, world, serving, settings
    ):
        # The fixture's engine ran with --num-gpu-blocks-override 24: 768 tokens. The estimate is
        # the local engine's LOCAL_KVCACHE_GIB in 32-token blocks: 1 GiB / (131,072 × 32) = 256
        # blocks = 8,192 tokens of Llama 3 8B, whatever the H100's memory.
        settings.LOCAL_KVCACHE_GIB = 1
        make_ready(serving, Exposition([fixture(AFTER_LOAD)]).url)
        collect_all()
        report = api_report(world, serving)
        assert (report["estimate_tokens"], report["reported_tokens"]) == (8192, 768)
        assert report["line"] == "vLLM reports 768 tokens (estimate 8,192, −91 %)." and report["why"] == FIXED
        assert " ".join(page_line(world, serving).split()) == f"{report['line']} {FIXED}"

    def test_engines_that_differ_are_listed_and_the_smallest_compared(self, world, serving):
        make_ready(serving, Exposition([two_engines(fixture(AFTER_LOAD), (900, 700))]).url)
        collect_all()
        report = kv_comparison(type(serving).objects.get(pk=serving.pk))
        assert report["reported_tokens"] == 700
        assert report["line"].startswith("vLLM reports 700 tokens on the smallest of its 2 engines (estimate ")
        assert [(e["name"], e["tokens"]) for e in report["engines"]] == [("engine 0", 900), ("engine 1", 700)]
        shown = page_line(world, serving)
        assert "engine 0: 900 tokens" in shown and "engine 1: 700 tokens" in shown
        assert api_report(world, serving) == {
            **report,
            "reported_at": report["reported_at"].isoformat().replace("+00:00", "Z"),
        }

    def test_equal_engines_read_as_per_engine(self, world, serving):
        make_ready(serving, Exposition([two_engines(fixture(AFTER_LOAD), (768, 768))]).url)
        collect_all()
        assert api_report(world, serving)["line"].startswith("vLLM reports 768 tokens per engine (2 engines) (")

    def test_through_prometheus_the_absence_says_where_the_portal_reads_it(self, world, serving, settings):
        settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # no cycle runs here: only the wording changes
        assert "only from the engines' own endpoints" in api_report(world, serving)["line"]

    def test_another_tenants_deployment_is_404(self, world, serving):
        answer = world.client("other_member").get(f"/api/v1/deployments/{serving.pk}/summary/")
        assert answer.status_code == 404
