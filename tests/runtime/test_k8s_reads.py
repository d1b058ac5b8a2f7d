"""The operating reads of runtime.k8s (Events, pod logs, discovery, access reviews) and what the
cluster backends build on them (runtime.backends.insight), over HTTP against the API test server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runtime import k8s
from runtime.backends.insight import LOG_BYTES_MAX, LOG_LINES_MAX, bounded
from runtime.backends.kuberay import KubeRayBackend
from runtime.spec import DeploymentSpec, FlavorSpec, PlatformSpec
from tests.support.k8s.startup import put_event, put_pod, vllm_line

NS = "tenant-a"
H100 = FlavorSpec("h100", "H100", "H100", 80, 8, node_labels=(("gpu", "h100"),))


def make_spec(*, deployment_id: int, name: str, namespace: str = NS) -> DeploymentSpec:
    return DeploymentSpec(
        deployment_id=deployment_id,
        name=name,
        namespace=namespace,
        tenant_slug="a",
        queue_name="lq",
        model_source="org/model",
        served_model_name="m",
        flavor=H100,
    )


@pytest.fixture
def cluster(k8s_api):
    c = k8s_api.cluster()
    yield c
    c.close()


class TestReads:
    def test_events_are_those_of_the_named_objects_oldest_first(self, k8s_api, cluster):
        now = datetime.now(UTC)
        put_event(k8s_api, NS, ("Pod", "llm-1-worker"), "Pulled", "pulled", now)
        put_event(k8s_api, NS, ("RayService", "llm-1"), "Created", "made", now - timedelta(seconds=9))
        put_event(k8s_api, NS, ("Pod", "llm-12-worker"), "Pulled", "someone else's", now)
        found = cluster.events_for(NS, {"llm-1", "llm-1-worker"})
        assert [e["reason"] for e in found] == ["Created", "Pulled"]
        assert cluster.calls["list"] == 1

    def test_a_log_is_bounded_by_lines_then_bytes(self, k8s_api, cluster):
        put_pod(k8s_api, NS, "p", 1)
        k8s_api.set_pod_log(NS, "p", "ray-worker", "".join(f"line {i}\n" for i in range(100)))
        assert cluster.pod_log(NS, "p", "ray-worker", tail_lines=2, limit_bytes=1000) == "line 98\nline 99\n"
        assert cluster.pod_log(NS, "p", "ray-worker", tail_lines=2, limit_bytes=4) == "line"

    def test_a_missing_pod_or_container_is_an_error_of_its_kind(self, k8s_api, cluster):
        put_pod(k8s_api, NS, "p", 1)
        with pytest.raises(k8s.NotFound):
            cluster.pod_log(NS, "absent", "ray-worker", tail_lines=1, limit_bytes=10)
        with pytest.raises(k8s.PermanentClusterError) as refused:
            cluster.pod_log(NS, "p", "other", tail_lines=1, limit_bytes=10)
        assert refused.value.status == 400

    def test_discovery_lists_groups_versions_and_resources(self, k8s_api, cluster):
        assert cluster.api_groups()["ray.io"] == ["v1"]
        assert "rayservices" in cluster.api_resources("ray.io", "v1")
        assert cluster.api_resources("ray.io", "v2") == set()
        k8s_api.undeclare(k8s.RAYSERVICE)
        k8s_api.undeclare(k8s.RAYCLUSTER)
        assert "ray.io" not in cluster.api_groups()

    def test_access_reviews_answer_for_each_triple(self, k8s_api, cluster):
        k8s_api.deny("get", "", "pods/log")
        assert cluster.can_i("list", "", "events") == (True, "")
        allowed, reason = cluster.can_i("get", "", "pods/log", namespace=NS)
        assert not allowed and "denied" in reason


class TestBounds:
    @pytest.mark.parametrize(
        "asked, expected",
        [
            ((None, None), (200, 65536)),
            ((0, 0), (1, 1)),
            ((-5, 10**12), (1, LOG_BYTES_MAX)),
            ((10**9, 5), (LOG_LINES_MAX, 5)),
        ],
    )
    def test_bounds_are_clamped(self, asked, expected):
        assert bounded(*asked) == expected


class TestClusterInsight:
    @pytest.fixture
    def backend(self, cluster):
        return KubeRayBackend(cluster, PlatformSpec())

    def test_events_cover_the_job_its_workload_and_its_pods_only(self, k8s_api, backend):
        spec = make_spec(namespace=NS, deployment_id=7, name="llm-7")
        k8s_api.put(k8s.RAYSERVICE, backend.desired(spec))
        put_pod(k8s_api, NS, "llm-7-raycluster-abc-worker-x", 7)
        put_pod(k8s_api, NS, "other-8-worker", 8)
        now = datetime.now(UTC)
        put_event(k8s_api, NS, ("RayService", "llm-7"), "ServiceCreated", "created", now - timedelta(seconds=5))
        put_event(
            k8s_api,
            NS,
            ("Pod", "llm-7-raycluster-abc-worker-x"),
            "FailedScheduling",
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            now,
            type_="Warning",
            count=4,
        )
        put_event(k8s_api, NS, ("Pod", "other-8-worker"), "Pulled", "not ours", now)
        rows = backend.events(spec)
        assert [(r["reason"], r["count"], r["object"]) for r in rows] == [
            ("ServiceCreated", 1, "RayService/llm-7"),
            ("FailedScheduling", 4, "Pod/llm-7-raycluster-abc-worker-x"),
        ]
        assert rows[1]["type"] == "Warning" and rows[1]["source"] == "kubernetes"

    def test_logs_are_per_pod_engine_container_bounded_and_redacted(self, k8s_api, backend):
        spec = make_spec(namespace=NS, deployment_id=7, name="llm-7")
        put_pod(k8s_api, NS, "llm-7-worker-a", 7, started=datetime.now(UTC))
        put_pod(k8s_api, NS, "llm-7-head", 7, container="ray-head")
        k8s_api.set_pod_log(
            NS,
            "llm-7-worker-a",
            "ray-worker",
            "boot\n" + vllm_line(datetime.now(UTC), "args --api-key sk-abcdefghijklmnop") + "last\n",
        )
        tails = backend.logs(spec, lines=2, max_bytes=10_000)
        assert [(t["pod"], t["container"]) for t in tails] == [
            ("llm-7-head", "ray-head"),
            ("llm-7-worker-a", "ray-worker"),
        ]
        worker = tails[1]
        assert "sk-abcdefghijklmnop" not in worker["text"] and worker["text"].endswith("last\n")
        assert "boot" not in worker["text"] and worker["truncated"]
