"""The decisions behind a worker-count change on KubeRay (issue 41), fast: what the approval page
says, which counts and pods the RayCluster patch names, when the portal reads `ready` while the
cluster grows, and which Workload slice stands for the job. The real controllers' side is
tests/cluster/test_replica_edit.py (and runtime/backends/rayresize.py cites their code)."""

from __future__ import annotations

import dataclasses

import pytest

from runtime.backends.kuberay import _counts_edited, change_impact
from runtime.backends.rayresize import (
    asked_workers,
    resized_groups,
    resizing_story,
    serving_cluster,
    target_replicas,
    with_asked_workers,
)
from runtime.manifests.common import ANNOTATION_ELASTIC_JOB
from runtime.manifests.rayservice import render_rayservice
from runtime.spec import PlatformSpec
from runtime.status import current_workload
from tests.runtime.test_k8s_reads import make_spec as _make_spec

CLUSTER = "chat-raycluster-abcde"


def make_spec():
    return _make_spec(deployment_id=7, name="chat")


def raycluster(replicas, low, high, *, to_delete=()) -> dict:
    group = {"groupName": "gpu", "replicas": replicas, "minReplicas": low, "maxReplicas": high}
    if to_delete:
        group["scaleStrategy"] = {"workersToDelete": list(to_delete)}
    return {"metadata": {"name": CLUSTER}, "spec": {"workerGroupSpecs": [{"groupName": "head-x"}, group]}}


def pod(name: str, created: str, *, ready: bool = True, group: str = "gpu", cluster: str = CLUSTER) -> dict:
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "labels": {"ray.io/cluster": cluster, "ray.io/group": group, "ray.io/node-type": "worker"},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def gpu_group(groups: list[dict]) -> dict:
    (group,) = [g for g in groups if g["groupName"] == "gpu"]
    return group


class TestResizedGroups:
    def test_growing_a_fixed_size_sets_all_three_counts_names_no_pod_and_keeps_the_other_groups(self):
        cluster = raycluster(1, 1, 1)
        groups = resized_groups(cluster, replicas=2, min_replicas=2, max_replicas=2, pods=[])
        assert groups[0] == {"groupName": "head-x"}
        assert gpu_group(groups) == {"groupName": "gpu", "replicas": 2, "minReplicas": 2, "maxReplicas": 2}
        assert cluster["spec"]["workerGroupSpecs"][1]["replicas"] == 1  # the read object is not changed

    def test_counts_already_there_need_no_patch(self):
        assert resized_groups(raycluster(2, 2, 2), replicas=2, min_replicas=2, max_replicas=2, pods=[]) is None

    def test_shrinking_names_a_pod_that_does_not_run_first_then_the_newest(self):
        pods = [
            pod("w-old", "2026-12-01T00:00:00Z"),
            pod("w-new", "2026-12-03T00:00:00Z"),
            pod("w-mid", "2026-12-02T00:00:00Z"),
            pod("w-stuck", "2026-11-30T00:00:00Z", ready=False),
            pod("other-cluster", "2026-12-04T00:00:00Z", cluster="x"),
            pod("other-group", "2026-12-04T00:00:00Z", group="cpu"),
        ]
        group = gpu_group(resized_groups(raycluster(4, 4, 4), replicas=2, min_replicas=2, max_replicas=2, pods=pods))
        assert group["scaleStrategy"] == {"workersToDelete": ["w-stuck", "w-new"]}
        assert group["replicas"] == 2

    def test_pods_already_named_for_deletion_are_kept(self):
        pods = [pod("w-a", "2026-12-01T00:00:00Z"), pod("w-b", "2026-12-02T00:00:00Z")]
        cluster = raycluster(2, 2, 2, to_delete=["w-gone"])
        group = gpu_group(resized_groups(cluster, replicas=1, min_replicas=1, max_replicas=1, pods=pods))
        assert group["scaleStrategy"] == {"workersToDelete": ["w-gone", "w-b"]}

    @pytest.mark.parametrize(
        "running, low, high, want",
        [(3, 1, 4, 3), (3, 1, 2, 2), (1, 2, 4, 2), (None, 2, 4, 2)],
    )
    def test_under_the_autoscaler_the_running_count_is_kept_within_the_new_bounds(self, running, low, high, want):
        assert target_replicas(running, None, low, high) == want

    def test_a_cluster_without_the_group_is_left_alone(self):
        cluster = {"metadata": {"name": CLUSTER}, "spec": {"workerGroupSpecs": [{"groupName": "other"}]}}
        assert resized_groups(cluster, replicas=2, min_replicas=2, max_replicas=2, pods=[]) is None


class TestResizingStory:
    def test_serving_on_the_old_workers_while_the_new_ones_wait_reads_ready(self):
        reason, message = resizing_story(before=1, ready=1, target=2, waiting="Pod w-2 is Pending: no GPU.")
        assert reason == "Resizing"
        assert "Serving on 1 GPU worker pod while the Ray cluster grows to 2" in message
        assert message.endswith("Pod w-2 is Pending: no GPU.")

    @pytest.mark.parametrize(
        "before, ready, target",
        [
            (1, 2, 2),  # the new size runs: plain ready
            (2, 0, 3),  # nothing serves: not a resize in progress, the workers are down
            (2, 1, 3),  # fewer than before serve: a worker was lost
            (3, 1, 1),  # a shrink is done once the target runs
        ],
    )
    def test_no_story_when_the_new_size_runs_or_fewer_than_before_serve(self, before, ready, target):
        assert resizing_story(before=before, ready=ready, target=target, waiting="") is None


def test_the_serving_cluster_is_the_active_one_else_the_pending_one():
    assert serving_cluster({"status": {}}) is None
    assert serving_cluster({"status": {"pendingServiceStatus": {"rayClusterName": "p"}}}) == "p"
    both = {"activeServiceStatus": {"rayClusterName": "a"}, "pendingServiceStatus": {"rayClusterName": "p"}}
    assert serving_cluster({"status": both}) == "a"


def slice_(name: str, created: str, **conditions: bool) -> dict:
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "status": {"conditions": [{"type": t, "status": "True" if v else "False"} for t, v in conditions.items()]},
    }


class TestCurrentWorkload:
    def test_the_admitted_slice_stands_for_the_job_while_the_larger_one_waits(self):
        old = slice_("old", "2026-12-01T00:00:00Z", Admitted=True)
        new = slice_("new", "2026-12-01T00:05:00Z", Admitted=False)
        assert current_workload([old, new])["metadata"]["name"] == "old"

    def test_once_admitted_the_new_slice_wins_and_the_finished_one_is_history(self):
        old = slice_("old", "2026-12-01T00:00:00Z", Admitted=True, Finished=True)
        new = slice_("new", "2026-12-01T00:05:00Z", Admitted=True)
        assert current_workload([old, new])["metadata"]["name"] == "new"

    def test_a_job_waiting_for_its_first_admission_is_its_newest_slice(self):
        assert current_workload([slice_("only", "2026-12-01T00:00:00Z", Admitted=False)])["metadata"]["name"] == "only"


class TestChangeImpact:
    def test_every_rayservice_is_an_elastic_job_with_the_in_tree_autoscaler(self):
        obj = render_rayservice(make_spec(), PlatformSpec())
        assert obj["metadata"]["annotations"] == {ANNOTATION_ELASTIC_JOB: "true"}
        assert obj["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] is True

    @pytest.mark.parametrize("change", [{"min_replicas": 2, "max_replicas": 2}, {"max_replicas": 3}])
    def test_a_worker_count_change_applies_on_the_running_cluster(self, change):
        old = make_spec()
        how, text = change_impact(old, dataclasses.replace(old, **change))
        assert how == "in_place", text
        assert "replaced" not in text and "stops answering" not in text

    def test_growing_says_the_workers_keep_serving_until_kueue_admits_the_larger_size(self):
        old = make_spec()
        how, text = change_impact(old, dataclasses.replace(old, min_replicas=2, max_replicas=2))
        assert "keep serving" in text and "Kueue admits the larger size" in text

    def test_any_other_ray_cluster_change_still_replaces_it_and_says_so(self):
        old = make_spec()
        how, text = change_impact(old, dataclasses.replace(old, tensor_parallel_size=2, min_replicas=2, max_replicas=2))
        assert how == "recreate" and "stops answering" in text


def served(replicas, low, high, mirrored) -> dict:
    group = {"groupName": "gpu", "minReplicas": low, "maxReplicas": high}
    if replicas is not None:
        group["replicas"] = replicas
    return {
        "spec": {"rayClusterConfig": {"workerGroupSpecs": [group]}},
        "status": {"activeServiceStatus": {"rayClusterStatus": {"desiredWorkerReplicas": mirrored}}},
    }


class TestAskedWorkers:
    def test_a_fixed_size_asks_its_own_count_whatever_the_mirror_kept(self):
        view = with_asked_workers(served(1, 1, 1, 2))  # the mirror from before a shrink to 1
        assert view["status"]["activeServiceStatus"]["rayClusterStatus"]["desiredWorkerReplicas"] == 1

    def test_under_the_autoscaler_the_mirror_is_kept_within_the_bounds(self):
        assert asked_workers(served(None, 1, 3, 2)) == 2
        assert asked_workers(served(None, 2, 3, 1)) == 2

    def test_the_object_read_is_left_as_it_was(self):
        obj = served(2, 2, 2, 1)
        with_asked_workers(obj)
        assert obj["status"]["activeServiceStatus"]["rayClusterStatus"]["desiredWorkerReplicas"] == 1


class TestCountsEditedByHand:
    """Counts on the RayService are the portal's: a hand edit is set back (tests/cluster/test_states.py)."""

    @staticmethod
    def service(replicas, low, high) -> dict:
        group = {"groupName": "gpu", "minReplicas": low, "maxReplicas": high}
        if replicas is not None:
            group["replicas"] = replicas
        return {"spec": {"rayClusterConfig": {"workerGroupSpecs": [group]}}}

    def test_an_edited_fixed_count_is_seen(self):
        assert _counts_edited(self.service(2, 2, 2), self.service(1, 1, 1))
        assert not _counts_edited(self.service(1, 1, 1), self.service(1, 1, 1))

    def test_under_the_autoscaler_only_the_bounds_count(self):
        assert not _counts_edited(self.service(3, 1, 4), self.service(None, 1, 4))
        assert _counts_edited(self.service(3, 1, 5), self.service(None, 1, 4))
