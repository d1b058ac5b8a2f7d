"""A RayService whose mirrored worker count stays behind (KubeRay 1.6.2 does not rewrite the
RayService status when only the RayCluster's status changes: runtime.status.cluster_story).

Seen on the real plane (tests/cluster/test_topology.py): both GPU workers Running and Ready, the
RayService's `activeServiceStatus.rayClusterStatus.readyWorkerReplicas` at 1 of 2 for minutes, and
the portal saying "provisioning". The pods of the active cluster decide.
"""

from __future__ import annotations

import dataclasses

import pytest

from runtime import k8s
from runtime.backends.kuberay import KubeRayBackend
from runtime.spec import PlatformSpec
from runtime.status import ready_worker_pods
from tests.runtime.test_k8s_reads import NS, make_spec
from tests.support import operators

CLUSTER = "llm-7-abcde"


def pod(name: str, *, node_type: str = "worker", ready: bool = True, cluster: str = CLUSTER, **meta) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"ray.io/cluster": cluster, "ray.io/node-type": node_type},
            **meta,
        },
        "spec": {"containers": [{"name": "ray-worker", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_only_ready_live_workers_of_that_cluster_count():
    pods = [
        pod("w1"),
        pod("w2", ready=False),
        pod("w3", deletionTimestamp="2026-12-06T05:00:00Z"),
        pod("head", node_type="head"),
        pod("other", cluster="llm-8-fghij"),
        pod("w4"),
    ]
    assert ready_worker_pods(pods, CLUSTER) == 2


@pytest.fixture
def backend(k8s_api):
    cluster = k8s_api.cluster()
    yield KubeRayBackend(cluster, PlatformSpec())
    cluster.close()


def stale(k8s_api, backend, spec) -> dict:
    """A served RayService whose mirror says 1 of 2 workers ready."""
    k8s_api.put(k8s.RAYSERVICE, backend.desired(spec))
    obj = operators.rayservice_ready(k8s_api, NS, spec.name)
    obj["status"]["activeServiceStatus"]["rayClusterName"] = CLUSTER
    obj["status"]["activeServiceStatus"]["rayClusterStatus"].update(desiredWorkerReplicas=2, readyWorkerReplicas=1)
    return obj


@pytest.mark.parametrize("second_ready, state", [(True, "ready"), (False, "provisioning")])
def test_the_pods_of_the_active_cluster_override_a_stale_mirror(k8s_api, backend, second_ready, state):
    # Two workers asked (as in test_topology), the mirror left at 1 of 2 ready.
    spec = dataclasses.replace(make_spec(deployment_id=7, name="llm-7"), min_replicas=2, max_replicas=2)
    obj = stale(k8s_api, backend, spec)
    k8s_api.put(k8s.POD, pod("llm-7-abcde-gpu-worker-a"))
    k8s_api.put(k8s.POD, pod("llm-7-abcde-gpu-worker-b", ready=second_ready))
    obs = backend.status(spec, obj, operators.workload_for(k8s_api, obj, {"QuotaReserved": True, "Admitted": True}))
    assert obs.state == state
    if state == "provisioning":
        assert obs.message == "1 of 2 GPU workers are ready; the others are not running yet."
