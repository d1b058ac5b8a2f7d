"""The scrape cycle end to end: a served exposition → derived samples → dashboard → advisor.

A local HTTP server serves the real vLLM series from ../shared/fixtures/metrics, one file per
scrape, as a deployment's metrics endpoint would.
"""

from datetime import UTC, datetime, timedelta

import pytest

from metrics.advice import advice_for
from metrics.charts import dashboard
from metrics.collect import collect_all, rate_window_s
from metrics.models import MetricSample, Resolution, ScrapeState
from metrics.presenters import busiest
from metrics.store import downsample, series
from runtime.exposition.derive import derive
from runtime.exposition.parse import parse_exposition
from runtime.exposition.snapshot import Snapshot
from tests.support.factories import draft
from tests.support.http_stubs import base_url, serve
from tests.support.shared import shared_path


def grown_between(a: Snapshot, b: Snapshot) -> float:
    return b.counter("generation_tokens_total") - a.counter("generation_tokens_total")


class Exposition:
    """Serves the given texts in order (the last one repeats); a special 'garbage' mode."""

    def __init__(self, texts):
        self.texts, self.index, self.mode = list(texts), 0, "ok"
        self.server = serve(self._respond)
        self.url = base_url(self.server) + "/metrics"

    def _respond(self, method, path, body):
        if self.mode == "garbage":
            return 200, "text/plain; version=0.0.4", b"<html>not metrics</html>"
        text = self.texts[min(self.index, len(self.texts) - 1)]
        self.index += 1
        return 200, "text/plain; version=0.0.4", text.encode()


@pytest.fixture
def series_files():
    folder = shared_path("fixtures", "metrics", "series-vllm-0.32-cpu")
    return sorted(folder.glob("*.prom"))


@pytest.fixture
def serving(world):
    from deployments import services

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
    services.deployment_approve(
        deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
    )
    dep.refresh_from_db()
    return dep


def make_ready(dep, url):
    """Ready, with one metrics endpoint: the local backend's shape (a KubeRay deployment's
    endpoints are its pods, found through the cluster: TestRayPods)."""
    type(dep).objects.filter(pk=dep.pk).update(state="ready", backend="local", metrics_url=url)


class TestCollect:
    def test_samples_from_a_served_series_rate_over_the_window(self, serving, series_files):
        texts = [f.read_text() for f in series_files[:6]]
        endpoint = Exposition(texts)
        make_ready(serving, endpoint.url)
        for _ in texts:
            collect_all()
        samples = list(MetricSample.objects.filter(deployment=serving).order_by("ts"))
        assert len(samples) == len(texts)
        # The first sample has gauges only; rates need two scrapes.
        assert samples[0].generation_tokens_per_s is None and samples[0].kv_cache_pct is not None
        # The scrapes are milliseconds apart here, all in one rate window (60 s at the 15 s
        # cycle): each point's rate covers every scrape since the first, so rate × the time since
        # the first scrape is the counter's growth since then (scrape times are ours).
        assert (samples[-1].ts - samples[0].ts).total_seconds() < rate_window_s() == 60.0
        snaps = [parse_exposition(t, timestamp=i * 2.0) for i, t in enumerate(texts)]
        for i in range(1, len(texts)):
            grown = snaps[i].counter("generation_tokens_total") - snaps[0].counter("generation_tokens_total")
            got = samples[i]
            assert got.generation_tokens_per_s * (got.ts - samples[0].ts).total_seconds() == pytest.approx(
                grown, rel=0.01
            )
            expected = derive(snaps[i - 1], snaps[i])
            assert got.kv_cache_pct == pytest.approx(expected.kv_cache_pct)
            assert got.waiting == expected.waiting and got.running == expected.running
            assert got.waiting_capacity == expected.waiting_capacity == got.waiting  # all wait for capacity
        # The intervals of the window are kept for the next cycle, a few numbers each.
        state = ScrapeState.objects.get(deployment=serving)
        assert len(state.history) == len(texts) - 1
        assert state.history[0]["c"]["generation_tokens"] == grown_between(snaps[0], snaps[1])

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

        other = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, name="other", max_replicas=1)
        )
        endpoint = Exposition([series_files[0].read_text()])
        make_ready(serving, "http://127.0.0.1:1/metrics")
        make_ready(other, endpoint.url)
        assert collect_all() == 1
        assert "127.0.0.1:1" not in (ScrapeState.objects.get(deployment=other).last_error or "")

    def test_a_failed_read_keeps_the_last_good_snapshot_and_time(self, serving, series_files):
        endpoint = Exposition([series_files[0].read_text()])
        make_ready(serving, endpoint.url)
        collect_all()
        good = ScrapeState.objects.get(deployment=serving)
        endpoint.mode = "garbage"
        collect_all()
        after = ScrapeState.objects.get(deployment=serving)
        assert after.last_error and after.last_attempt > good.last_attempt
        assert after.last_success == good.last_success and after.snapshot == good.snapshot


def _shard_messages(take: bool = False) -> list[dict]:
    """Shard tasks waiting in the test broker (Redis db 15, queue "celery"), oldest first."""
    import base64
    import json

    import redis
    from django.conf import settings

    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    found = []
    for raw in reversed(broker.lrange("celery", 0, -1)):  # kombu LPUSHes: the tail is oldest
        message = json.loads(raw)
        if message["headers"]["task"] == "metrics.tasks.scrape_metrics_shard_task":
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            found.append({"args": args, "expires": message["headers"]["expires"]})
            if take:
                broker.lrem("celery", 1, raw)
    return found


class TestShardedCycle:
    """A cycle over more than METRICS_SHARD_SIZE deployments is shared out through the broker."""

    @pytest.fixture
    def three(self, world, series_files):
        from deployments import services

        _shard_messages(take=True)
        endpoint = Exposition([f.read_text() for f in series_files[:2]])
        deps = []
        for name in ("one", "two", "three"):
            dep = services.deployment_create(
                tenant=world.alpha, user=world.users["member"], data=draft(world, name=name, max_replicas=1)
            )
            make_ready(dep, endpoint.url)
            deps.append(dep)
        yield deps
        _shard_messages(take=True)

    def test_the_first_shard_is_read_in_place_the_rest_are_queued_with_an_expiry(self, three, settings):
        from metrics.tasks import scrape_metrics_shard_task, scrape_metrics_task

        settings.METRICS_SHARD_SIZE = 1
        assert scrape_metrics_task() == 1
        first, *others = sorted(d.pk for d in three)
        assert list(ScrapeState.objects.values_list("deployment_id", flat=True)) == [first]
        queued = _shard_messages(take=True)
        assert [m["args"] for m in queued] == [[[pk]] for pk in others]
        assert all(m["expires"] for m in queued)  # a late shard is dropped, not piled up
        for message in queued:  # what a worker process would run
            assert scrape_metrics_shard_task(*message["args"]) == 1
        assert ScrapeState.objects.filter(last_success__isnull=False).count() == 3
        assert MetricSample.objects.filter(deployment__in=three).count() == 3

    def test_an_overloaded_fleet_is_read_round_by_round_not_starved(self, three, settings):
        # Each cycle here manages only its in-place shard; the queued ones expire unread. In a
        # fixed order the same deployment would be read every cycle and the others never.
        from metrics.tasks import scrape_metrics_task

        settings.METRICS_SHARD_SIZE = 1
        a, b, c = sorted(d.pk for d in three)
        read = []
        for _ in range(3):
            before = set(ScrapeState.objects.values_list("deployment_id", flat=True))
            scrape_metrics_task()
            queued = _shard_messages(take=True)  # expired: never run
            read.append((set(ScrapeState.objects.values_list("deployment_id", flat=True)) - before) or "again")
        assert read == [{a}, {b}, {c}]
        assert [m["args"] for m in queued] == [[[a]], [[b]]]  # then the longest unread first

    def test_one_shard_is_read_in_place_without_messages(self, three, settings):
        from metrics.tasks import scrape_metrics_task

        settings.METRICS_SHARD_SIZE = 100
        assert scrape_metrics_task() == 3
        assert _shard_messages() == []

    def test_a_shard_skips_a_deployment_that_stopped_since_it_was_planned(self, three):
        from metrics.collect import collect

        type(three[0]).objects.filter(pk=three[0].pk).update(state="stopped")
        assert collect([three[0].pk, three[1].pk]) == 1
        assert list(ScrapeState.objects.values_list("deployment_id", flat=True)) == [three[1].pk]

    def test_shards_cover_every_id_once_in_order(self):
        from metrics.collect import shards

        assert shards(list(range(7)), 3) == [[0, 1, 2], [3, 4, 5], [6]]
        assert shards([], 3) == []


RAY_UNDER_LOAD = "ray-serve-llm-vllm-0.32-cpu-under-load.prom"


def as_another_replica(text: str, tag: str) -> str:
    """The same Ray exposition as if a different replica on another node had written it."""
    return text.replace('ReplicaId="', f'ReplicaId="{tag}-').replace('WorkerId="', f'WorkerId="{tag}-')


def ray_pod(dep, name: str, url: str | None, *, phase: str = "Running", owner: str | None = None, **meta) -> dict:
    """A pod as KubeRay creates it from the RayService's template (the portal's labels on it)."""
    labels = {
        "app.kubernetes.io/managed-by": "llm-portal",
        "llm-portal.io/deployment-id": owner or str(dep.pk),
        "ray.io/node-type": "head" if name.endswith("head") else "worker",
    }
    status = {"phase": phase}
    port = 8080
    if url:
        host_port = url.split("//")[1].split("/")[0]
        status["podIP"], port = host_port.rsplit(":", 1)[0], int(host_port.rsplit(":", 1)[1])
    return {
        "metadata": {"name": name, "namespace": dep.tenant.namespace, "labels": labels, **meta},
        "spec": {"containers": [{"name": "ray", "ports": [{"name": "metrics", "containerPort": port}]}]},
        "status": status,
    }


class TestRayPods:
    """KubeRay without Prometheus: the replicas (and their ray_vllm_* series) run on the worker
    pods, each exporting its own node; the head holds none. The cycle reads every running pod."""

    @pytest.fixture
    def ray_dep(self, serving, cluster_api):
        type(serving).objects.filter(pk=serving.pk).update(
            state="ready", metrics_url=f"http://{serving.resource_name}-head-svc.alpha.svc:8080/metrics"
        )
        serving.refresh_from_db()
        return serving

    @pytest.fixture
    def ray_text(self):
        return shared_path("fixtures", "metrics", RAY_UNDER_LOAD).read_text()

    def put_pods(self, api, *pods):
        from runtime import k8s

        for pod in pods:
            api.put(k8s.POD, pod)

    def test_every_running_pod_is_read_and_merged_into_one_snapshot(self, ray_dep, cluster_api, ray_text):
        # The workers hold the replicas' ray_vllm_* series; the head the Serve controller's ray_serve_*.
        serve_lines = [line for line in ray_text.splitlines() if "ray_serve_" in line]
        workers = "\n".join(line for line in ray_text.splitlines() if "ray_serve_" not in line) + "\n"
        one, two = Exposition([workers]), Exposition([as_another_replica(workers, "w2")])
        head = Exposition(["\n".join(serve_lines) + "\n"])
        self.put_pods(
            cluster_api,
            ray_pod(ray_dep, "llm-head", head.url),
            ray_pod(ray_dep, "llm-w1", one.url),
            ray_pod(ray_dep, "llm-w2", two.url),
            # Not read: not started, on its way out, another deployment's.
            ray_pod(ray_dep, "llm-w3", None, phase="Pending"),
            ray_pod(ray_dep, "llm-w4", "http://127.0.0.1:1/metrics", deletionTimestamp="2026-11-30T08:00:00Z"),
            ray_pod(ray_dep, "other-w1", "http://127.0.0.1:1/metrics", owner="999"),
        )

        collect_all()

        state = ScrapeState.objects.get(deployment=ray_dep)
        assert state.last_error == "" and state.last_success is not None
        alone = parse_exposition(ray_text)
        both = Snapshot.from_dict(state.snapshot)
        assert both.replica_count == 2 * alone.replica_count > 0
        assert both.counter("generation_tokens_total") == 2 * alone.counter("generation_tokens_total") > 0
        assert both.gauge_sum("num_requests_running") == 2 * alone.gauge_sum("num_requests_running")
        assert [one.index, two.index, head.index] == [1, 1, 1]
        # Ray Serve's replica gauges, from the head: 1 healthy replica of LLMServer:tiny, target 1.
        assert both.serve_replicas() == (1.0, 1.0)
        sample = MetricSample.objects.get(deployment=ray_dep)
        assert (sample.replicas_running, sample.replicas_target, sample.running) == (1.0, 1.0, 2 * 39.0)
        assert cluster_api.proxied_requests().count(("GET", "/api/v1/namespaces/alpha/pods")) == 1

    def test_one_unreadable_pod_leaves_a_gap_not_a_partial_number(self, ray_dep, cluster_api, ray_text):
        one = Exposition([ray_text])
        self.put_pods(
            cluster_api, ray_pod(ray_dep, "llm-w1", one.url), ray_pod(ray_dep, "llm-w2", "http://127.0.0.1:1/metrics")
        )
        assert collect_all() == 0
        state = ScrapeState.objects.get(deployment=ray_dep)
        assert "127.0.0.1:1" in state.last_error and state.last_success is None

    def test_pods_without_vllm_series_are_an_error(self, ray_dep, cluster_api, ray_text):
        bare = Exposition(["\n".join(line for line in ray_text.splitlines() if "ray_vllm_" not in line) + "\n"])
        self.put_pods(cluster_api, ray_pod(ray_dep, "llm-w1", bare.url), ray_pod(ray_dep, "llm-w2", bare.url))
        assert collect_all() == 0
        assert "no vllm" in ScrapeState.objects.get(deployment=ray_dep).last_error

    def test_no_running_pod_is_an_error_for_that_deployment_only(self, ray_dep, cluster_api, ray_text, world):
        from deployments import services

        local = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, name="local-one", max_replicas=1)
        )
        make_ready(local, Exposition([ray_text]).url)
        self.put_pods(cluster_api, ray_pod(ray_dep, "llm-w1", None, phase="Pending"))
        assert collect_all() == 1
        assert "no running pod" in ScrapeState.objects.get(deployment=ray_dep).last_error
        assert ScrapeState.objects.get(deployment=local).last_error == ""

    def test_an_unreachable_api_server_is_recorded_not_raised(self, ray_dep, cluster_api):
        cluster_api.fail_always(403)
        assert collect_all() == 0
        assert "cannot list the pods in alpha" in ScrapeState.objects.get(deployment=ray_dep).last_error

    def test_a_sharded_cycle_lists_each_namespace_once(self, world, cluster_api, ray_text, settings):
        from deployments import services
        from metrics.tasks import scrape_metrics_shard_task, scrape_metrics_task

        _shard_messages(take=True)
        one = Exposition([ray_text])
        deps = []
        for i in range(2):  # created alternately, so by id alone every shard would span both
            for tenant in (world.alpha, world.beta):
                user = world.users["member"] if tenant == world.alpha else world.users["other_member"]
                dep = services.deployment_create(
                    tenant=tenant, user=user, data=draft(world, name=f"r{i}", max_replicas=1)
                )
                type(dep).objects.filter(pk=dep.pk).update(state="ready")
                dep.refresh_from_db()
                self.put_pods(cluster_api, ray_pod(dep, f"{dep.resource_name}-w1", one.url))
                deps.append(dep)
        settings.METRICS_SHARD_SIZE = 2
        scrape_metrics_task()
        for message in _shard_messages(take=True):
            scrape_metrics_shard_task(*message["args"])
        assert ScrapeState.objects.filter(deployment__in=deps, last_success__isnull=False).count() == 4
        lists = [p for m, p in cluster_api.proxied_requests() if p.endswith("/pods")]
        assert sorted(lists) == ["/api/v1/namespaces/alpha/pods", "/api/v1/namespaces/beta/pods"]

    def test_the_metrics_port_is_the_one_the_pod_names(self):
        from metrics.collect import pod_metrics_url

        pod = {
            "metadata": {},
            "status": {"phase": "Running", "podIP": "10.1.2.3"},
            "spec": {
                "containers": [
                    {"ports": [{"name": "serve", "containerPort": 8000}, {"name": "metrics", "containerPort": 9090}]}
                ]
            },
        }
        assert pod_metrics_url(pod) == "http://10.1.2.3:9090/metrics"
        assert pod_metrics_url({**pod, "spec": {}}) == "http://10.1.2.3:8080/metrics"  # KubeRay's default
        assert (
            pod_metrics_url({**pod, "status": {"phase": "Running", "podIP": "fd00::7"}})
            == "http://[fd00::7]:9090/metrics"
        )
        assert pod_metrics_url({**pod, "status": {"phase": "Succeeded", "podIP": "10.1.2.3"}}) is None


class TestDashboardData:
    def test_series_feed_the_charts_and_downsampling_bounds_storage(self, serving):
        now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
        rows = [
            MetricSample(
                deployment=serving,
                resolution=Resolution.RAW,
                ts=now - timedelta(seconds=15 * i),
                generation_tokens_per_s=float(i % 50),
                kv_cache_pct=40.0,
                waiting=0,
                running=1,
            )
            for i in range(4 * 24 * 60 * 2)
        ]  # two days of 15 s points
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


def raw(dep, ts, **values):
    return MetricSample(deployment=dep, resolution=Resolution.RAW, ts=ts, **values)


class TestWindows:
    """Every window shows data as soon as there is any, across rollups and raw rows."""

    def test_a_fresh_deployment_shows_in_every_window_before_any_rollup(self, serving):
        now = datetime(2026, 11, 30, 12, 5, 30, tzinfo=UTC)
        MetricSample.objects.bulk_create(
            [raw(serving, now - timedelta(seconds=15 * i), interval_s=15.0, waiting=2.0) for i in range(21)]
        )  # five minutes of raw points (12:00:30-12:05:30), downsample never ran
        counts = {w: len(series(serving, w, now=now)["timestamps"]) for w in ("1h", "6h", "24h", "7d", "30d")}
        assert counts == {"1h": 21, "6h": 21, "24h": 6, "7d": 1, "30d": 1}
        week = series(serving, "7d", now=now)
        assert week["series"]["waiting"] == [2.0] and week["series"]["interval_s"] == [21 * 15.0]

    def test_rollups_and_newer_raw_rows_join_without_a_seam_or_a_double_count(self, serving):
        now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
        MetricSample.objects.bulk_create(
            [
                raw(serving, now - timedelta(seconds=15 * i), interval_s=15.0, generation_tokens_per_s=10.0)
                for i in range(1, 4 * 30 + 1)
            ]
        )  # the last 30 minutes
        downsample(now=now - timedelta(minutes=10))  # rolled up until 11:50; the rest is raw
        assert MetricSample.objects.filter(resolution=Resolution.TEN_MINUTES).count() == 2
        day = series(serving, "24h", now=now)
        assert len(day["timestamps"]) == 30 and len(set(day["timestamps"])) == 30
        assert set(day["series"]["generation_tokens_per_s"]) == {10.0}
        assert sum(day["series"]["interval_s"]) == 4 * 30 * 15.0  # every raw second exactly once
        week = series(serving, "7d", now=now)
        assert len(week["timestamps"]) == 3 and sum(week["series"]["interval_s"]) == 4 * 30 * 15.0

    def test_rates_roll_up_weighted_by_the_time_they_cover(self, serving):
        now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
        start = now - timedelta(minutes=1)
        MetricSample.objects.bulk_create(
            [
                raw(serving, start + timedelta(seconds=5), interval_s=5.0, generation_tokens_per_s=100.0),
                raw(serving, start + timedelta(seconds=50), interval_s=45.0, generation_tokens_per_s=0.0),
            ]
        )
        (rate,) = series(serving, "24h", now=now)["series"]["generation_tokens_per_s"]
        assert rate == pytest.approx(500 / 50)  # 500 tokens in 50 s, not the mean of 100 and 0


class TestRatios:
    def test_hit_ratio_is_a_ratio_of_sums_at_every_resolution(self, serving):
        now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
        base = now - timedelta(minutes=1)
        MetricSample.objects.bulk_create(
            [  # 1 of 1 lookups hit, then 10 of 100: the hit ratio is 11/101, not the mean 55 %
                raw(
                    serving, base + timedelta(seconds=10), interval_s=10.0, prefix_cache_hits=1, prefix_cache_queries=1
                ),
                raw(
                    serving,
                    base + timedelta(seconds=20),
                    interval_s=10.0,
                    prefix_cache_hits=10,
                    prefix_cache_queries=100,
                ),
                raw(serving, base + timedelta(seconds=30), interval_s=10.0, requests_finished=50, requests_failed=5),
            ]
        )
        hour = series(serving, "1h", now=now)
        assert hour["series"]["prefix_cache_hit_pct"] == [100.0, 10.0, None]
        assert hour["series"]["prefix_cache_hit_pct_cumulative"] == pytest.approx(
            [100.0, 100 * 11 / 101, 100 * 11 / 101]
        )
        assert hour["totals"]["prefix_cache_hit_pct"] == pytest.approx(100 * 11 / 101)
        assert hour["totals"]["error_pct"] == pytest.approx(10.0)
        (rolled,) = series(serving, "24h", now=now)["series"]["prefix_cache_hit_pct"]
        assert rolled == pytest.approx(100 * 11 / 101)
        downsample(now=now + timedelta(minutes=20))
        (stored,) = series(serving, "7d", now=now)["series"]["prefix_cache_hit_pct"]
        assert stored == pytest.approx(100 * 11 / 101)

    def test_a_single_point_is_drawn_as_a_point_on_the_windows_axis(self, serving):
        now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
        MetricSample.objects.create(deployment=serving, ts=now - timedelta(seconds=5), waiting=0.0, running=0.0)
        data = series(serving, "24h", now=now)
        figures = dashboard(data["timestamps"], data["series"], span=(data["start"], data["end"]))
        queue = figures["queue"]
        assert {trace.mode for trace in queue.data} == {"lines+markers"}
        start, end = queue.layout.xaxis.range
        assert (end - start) == timedelta(minutes=5)  # a new deployment's first point: an axis of minutes
        assert tuple(queue.layout.yaxis.range) == (0, 1)  # zeros on a 0-1 axis, not -1..1


class TestBusiest:
    def test_each_deployment_is_listed_once_busiest_first(self, world, serving):
        from deployments import services

        other = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, name="other")
        )
        now = datetime.now(UTC)
        MetricSample.objects.bulk_create(
            [raw(serving, now - timedelta(seconds=15 * i), generation_tokens_per_s=100.0 + i) for i in range(10)]
            + [raw(other, now - timedelta(seconds=15 * i), generation_tokens_per_s=300.0) for i in range(10)]
            + [raw(other, now - timedelta(minutes=30), generation_tokens_per_s=9999.0)]  # too old to count
        )
        rows = busiest(minutes=5, limit=10)
        assert [r.deployment_id for r in rows] == [other.pk, serving.pk]
        assert rows[1].generation_tokens_per_s == pytest.approx(104.5)


class TestAdvisorOnStoredSamples:
    def test_sustained_queue_advises_scale_out_with_quota_headroom(self, serving):
        now = datetime.now(UTC)
        MetricSample.objects.bulk_create(
            [
                MetricSample(
                    deployment=serving,
                    ts=now - timedelta(seconds=15 * i),
                    waiting=30,
                    running=4,
                    kv_cache_pct=60,
                    generation_tokens_per_s=100,
                )
                for i in range(25)
            ]
        )
        advice = advice_for(serving, now=now)
        assert [a.code for a in advice] == ["scale_out"]
        assert advice[0].evidence["series"] == "waiting"

    def test_quiet_deployment_gets_no_advice(self, serving):
        now = datetime.now(UTC)
        MetricSample.objects.bulk_create(
            [
                MetricSample(
                    deployment=serving,
                    ts=now - timedelta(seconds=15 * i),
                    waiting=0,
                    running=1,
                    kv_cache_pct=10,
                    generation_tokens_per_s=50,
                    ttft_p95=0.2,
                )
                for i in range(25)
            ]
        )
        assert advice_for(serving, now=now) == []
