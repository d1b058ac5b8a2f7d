"""Kueue's visibility API through `Cluster.pending_workloads`, against the test server's stand-in
(tests/support/k8s/emulator.py derives the queue from the Workloads and LocalQueues it holds)."""

from __future__ import annotations

import json
import urllib.request

import pytest

from runtime import k8s
from tests.support.k8s import K8sApiServer


def queue(api: K8sApiServer, ns: str, lq: str, cq: str) -> None:
    api.put(k8s.LOCALQUEUE, {"metadata": {"name": lq, "namespace": ns}, "spec": {"clusterQueue": cq}})


def workload(api: K8sApiServer, ns: str, name: str, lq: str, *, priority: int = 0, admitted: bool = False) -> None:
    conditions = [{"type": "Admitted", "status": "True", "reason": "Admitted"}] if admitted else []
    api.put(
        k8s.WORKLOAD,
        {
            "metadata": {"name": name, "namespace": ns},
            "spec": {"queueName": lq, "priority": priority, "podSets": []},
            "status": {"conditions": conditions},
        },
    )


@pytest.fixture
def shared_queue(k8s_api: K8sApiServer) -> K8sApiServer:
    """ClusterQueue `cq` fed by LocalQueues a/lq and b/lq; one admitted Workload, four pending."""
    k8s_api.put(k8s.CLUSTERQUEUE, {"metadata": {"name": "cq"}, "spec": {}})
    queue(k8s_api, "a", "lq", "cq")
    queue(k8s_api, "b", "lq", "cq")
    workload(k8s_api, "a", "running", "lq", admitted=True)
    workload(k8s_api, "a", "first", "lq")
    workload(k8s_api, "b", "second", "lq")
    workload(k8s_api, "a", "third", "lq")
    workload(k8s_api, "b", "urgent", "lq", priority=100)
    return k8s_api


class TestPendingWorkloads:
    def test_positions_in_the_cluster_queue_and_each_local_queue(self, shared_queue):
        items = shared_queue.cluster(timeout=5.0).pending_workloads("cq")
        rows = [
            (i["metadata"]["namespace"], i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"])
            for i in items
        ]
        assert rows == [("b", "urgent", 0, 0), ("a", "first", 1, 0), ("b", "second", 2, 1), ("a", "third", 3, 1)]

    def test_the_local_queue_view_holds_only_its_own(self, shared_queue):
        url = f"{shared_queue.url}/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/a/localqueues/lq/pendingworkloads"
        with urllib.request.urlopen(url) as response:
            body = json.load(response)
        assert body["kind"] == "PendingWorkloadsSummary"
        assert [(i["metadata"]["name"], i["positionInClusterQueue"]) for i in body["items"]] == [
            ("first", 1),
            ("third", 3),
        ]

    def test_a_missing_cluster_queue_is_not_found(self, k8s_api):
        with pytest.raises(k8s.NotFound):
            k8s_api.cluster(timeout=5.0).pending_workloads("nope")

    @pytest.mark.parametrize(("fault", "error"), [(403, k8s.PermanentClusterError), (503, k8s.TransientClusterError)])
    def test_errors_are_classified_like_every_other_call(self, shared_queue, fault, error):
        cluster = shared_queue.cluster(timeout=5.0)
        shared_queue.fail_always(fault)
        with pytest.raises(error):
            cluster.pending_workloads("cq")
        assert cluster.calls["pending_workloads"] == 1
