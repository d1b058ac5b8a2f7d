"""An autoscaling deployment through Kueue's workload slices, on the real Kueue 0.19.2 and KubeRay
1.6.2 (issue 38).

The portal marks an autoscaling RayService `kueue.x-k8s.io/elastic-job: "true"` (runtime/manifests/
rayservice.py) and turns on KubeRay's in-tree autoscaler. Kueue 0.19.2 has ElasticJobsViaWorkloadSlices
on by default (beta since 0.18: kubernetes-sigs/kueue pkg/features/kube_features.go, v0.19.2), and
slices a job only with both the gate and the annotation (pkg/workloadslicing/workloadslicing.go,
Enabled). The Ray autoscaler scales a worker group by patching the RayCluster's
`workerGroupSpecs[i].replicas`, naming the pods to remove in `scaleStrategy.workersToDelete` when it
scales down (ray-project/ray python/ray/autoscaler/_private/kuberay/node_provider.py, ray-2.60.0). No
Ray autoscaler runs here (the head is a stand-in), so the test makes those same patches.

Seen here: the scale-up is a new Workload slice for two workers, admitted within seconds while the
first keeps its pod Running; the first slice is then Finished. A worker-count edit of the RayService
itself (tests/cluster/test_replica_edit.py) instead makes Kueue evict the whole job: that is why the
portal never edits counts in place and leaves them to the autoscaler within the admitted range.
"""

from __future__ import annotations

import json

from deployments.choices import State
from runtime import k8s
from runtime.status import current_workload
from tests.cluster.chain import condition, converge, onboard, request_and_approve

RAYCLUSTER = k8s.Kind("ray.io", "v1", "rayclusters", "RayCluster")


def slices_of(kube, dep) -> list[dict]:
    uid = kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)["metadata"]["uid"]
    return [
        w
        for w in kube.list(k8s.WORKLOAD, dep.tenant.namespace)
        if (w["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid") == uid
    ]


def gpu_count(workload: dict) -> int:
    return next(p["count"] for p in workload["spec"]["podSets"] if p["name"] != "head")


def workers(kube, dep, cluster: str) -> list[dict]:
    return [
        p
        for p in kube.pods(dep.tenant.namespace)
        if p["metadata"]["labels"].get("ray.io/cluster") == cluster
        and p["metadata"]["labels"].get("ray.io/node-type") == "worker"
        and not p["metadata"].get("deletionTimestamp")
    ]


def autoscale(kube, dep, cluster: str, replicas: int, delete: list[str] = ()) -> None:
    """What the Ray autoscaler's KubeRay node provider patches on the RayCluster."""
    ops = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": replicas}]
    if delete:
        ops.append(
            {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy", "value": {"workersToDelete": list(delete)}}
        )
    kube.plane.kubectl("-n", dep.tenant.namespace, "patch", "raycluster", cluster, "--type=json", "-p", json.dumps(ops))


def test_the_autoscaler_scales_within_the_reservation_through_slices_and_the_portal_stays_truthful(world, kube):
    onboard(kube, world.h100)
    dep = request_and_approve(world, flavor=world.h100, name="elastic", min_replicas=1, max_replicas=2)
    converge(kube, dep, lambda d: d.state == State.READY, timeout=90, what="ready")
    assert dep.reserved_gpus == 2  # the most the autoscaler may reach: max replicas x GPUs per replica
    cluster = kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace)["status"]["activeServiceStatus"][
        "rayClusterName"
    ]
    (first,) = slices_of(kube, dep)
    assert gpu_count(first) == 1

    autoscale(kube, dep, cluster, 2)

    def scaled_up(d) -> bool:
        live = current_workload(slices_of(kube, d))
        pods = workers(kube, d, cluster)
        return (
            live["metadata"]["name"] != first["metadata"]["name"]
            and gpu_count(live) == 2
            and condition(live, "Admitted").get("status") == "True"
            and len(pods) == 2
            and all(p["status"].get("phase") == "Running" for p in pods)
            and d.state == State.READY
        )

    converge(kube, dep, scaled_up, timeout=60, what="a second worker through a new slice")
    old = next(w for w in slices_of(kube, dep) if w["metadata"]["name"] == first["metadata"]["name"])
    assert condition(old, "Finished").get("status") == "True"  # replaced, not running beside it
    # Kueue charges what the portal reserved, never more.
    charged = sum(
        int(a["resourceUsage"].get("nvidia.com/gpu", 0))
        for a in current_workload(slices_of(kube, dep))["status"]["admission"]["podSetAssignments"]
    )
    assert charged == 2 == dep.reserved_gpus
    assert dep.condition("Admitted")["status"] == "True"

    # Scale down: the autoscaler names the worker to remove; the job is not evicted.
    keep, drop = sorted(p["metadata"]["name"] for p in workers(kube, dep, cluster))
    autoscale(kube, dep, cluster, 1, [drop])

    def scaled_down(d) -> bool:
        pods = workers(kube, d, cluster)
        live = current_workload(slices_of(kube, d))
        return (
            [p["metadata"]["name"] for p in pods] == [keep]
            and gpu_count(live) == 1
            and condition(live, "Admitted").get("status") == "True"
            and d.state == State.READY
        )

    converge(kube, dep, scaled_down, timeout=60, what="one worker left, the job still admitted")
