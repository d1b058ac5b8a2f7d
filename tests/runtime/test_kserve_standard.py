"""KServe's Standard mode (the default): golden files, the CRD schema, what the mode can and cannot
keep, the Service a route targets in each mode, what Kueue charges a predictor pod, and how a
deployment's Workload is picked among its pods'. KServe facts cite kserve/kserve v0.20.0.

Regenerate the golden files after an intended change with
`UPDATE_GOLDEN=1 pytest tests/runtime/test_kserve_standard.py`, then review the diff.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.backends.base import stamp
from runtime.backends.kserve import deployment_workload, pod_workloads
from runtime.manifests import kserve
from runtime.manifests.kueue import render_cluster_queue
from runtime.spec import FlavorQuotaSpec, PlatformSpec, RenderError, TenantQueueSpec
from tests.runtime.test_kserve import H100, L4, container, predictor, small_spec
from tests.support.crd import assert_valid

GOLDEN = Path(__file__).parent / "golden"
STANDARD = PlatformSpec()  # the default mode
KNATIVE = PlatformSpec(kserve_deployment_mode="Knative")


def render(spec, platform: PlatformSpec = STANDARD) -> dict[str, Any]:
    return kserve.render_inferenceservice(spec, platform)


def s3_spec(**changes: Any):
    """S3 weights (the storage initializer's init container), two fixed replicas, an H100."""
    return small_spec(
        name="mistral-s3",
        deployment_id=9,
        model_source="s3://models/mistral-7b-instruct",
        served_model_name="mistral-7b",
        flavor=H100,
        tensor_parallel_size=2,
        min_replicas=2,
        max_replicas=2,
        **changes,
    )


GOLDEN_CASES = {"small": lambda: render(small_spec()), "s3": lambda: render(s3_spec())}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_rendered_standard_inferenceservice_matches_golden_file(case: str) -> None:
    rendered = GOLDEN_CASES[case]()
    path = GOLDEN / f"kserve-standard-{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(yaml.safe_dump(rendered, sort_keys=False, width=100))
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 and review it"
    assert rendered == yaml.safe_load(path.read_text())


@pytest.mark.parametrize(
    "spec", [small_spec(), s3_spec(), small_spec(model_source="pvc://weights/qwen"), small_spec(flavor=H100)]
)
def test_standard_inferenceservice_is_valid_against_the_crd(spec) -> None:
    assert_valid(render(spec))


class TestStandardMode:
    def test_the_mode_is_explicit_with_no_autoscaler_and_no_knative_annotation(self) -> None:
        isvc = render(small_spec())
        # KServe v0.20.0 pkg/constants: "Standard" (legacy alias "RawDeployment"); autoscalerClass
        # "none": no HPA, the Deployment's replicas are minReplicas (deployment_reconciler.go).
        assert isvc["metadata"]["annotations"] == {
            "serving.kserve.io/deploymentMode": "Standard",
            "serving.kserve.io/autoscalerClass": "none",
        }
        every_key = [*isvc["metadata"]["annotations"], *predictor(isvc)["annotations"]]
        assert not [k for k in every_key if "knative.dev" in k]
        assert "scaleMetric" not in predictor(isvc) and "scaleTarget" not in predictor(isvc)

    def test_a_fixed_number_of_replicas(self) -> None:
        pred = predictor(render(s3_spec()))
        assert (pred["minReplicas"], pred["maxReplicas"]) == (2, 2)

    def test_scale_to_zero_is_refused_for_knative_mode(self) -> None:
        with pytest.raises(RenderError, match=r"min_replicas 0 \(scale to zero\) needs KServe's Knative mode"):
            render(small_spec(min_replicas=0, max_replicas=1))

    def test_autoscaling_bounds_are_refused(self) -> None:
        with pytest.raises(RenderError, match=r"replicas 1 to 3: .*fixed number of replicas.*kuberay"):
            render(small_spec(min_replicas=1, max_replicas=3))

    def test_the_same_bounds_autoscale_in_knative_mode(self) -> None:
        pred = predictor(render(small_spec(min_replicas=0, max_replicas=3), KNATIVE))
        assert (pred["minReplicas"], pred["maxReplicas"], pred["scaleMetric"]) == (0, 3, "concurrency")

    def test_requests_equal_limits_guaranteed_qos(self) -> None:
        resources = container(render(s3_spec()))["resources"]
        assert resources["requests"] == resources["limits"] == {"nvidia.com/gpu": 2, "cpu": 24, "memory": "240Gi"}

    def test_an_unknown_mode_is_refused(self) -> None:
        with pytest.raises(RenderError, match="'Serverless' is not one of Standard, Knative"):
            render(small_spec(), replace(STANDARD, kserve_deployment_mode="Serverless"))


class TestRoute:
    def test_standard_mode_routes_to_kserves_predictor_service_port_80(self) -> None:
        # service_reconciler.go createDefaultSvc: `<name>-predictor`, port 80 (CommonDefaultHttpPort)
        # to the container's first port, 8080 here.
        assert kserve.predictor_service(small_spec()) == ("qwen-small-predictor", 80)
        assert kserve.predictor_service(small_spec(), kserve.MODE_STANDARD) == ("qwen-small-predictor", 80)
        assert container(render(small_spec()))["ports"][0]["containerPort"] == kserve.PORT_HTTP

    def test_knative_mode_has_no_service_a_gateway_route_can_target(self) -> None:
        with pytest.raises(RenderError, match=r"Knative mode cannot be exposed on the portal's Gateway.*ExternalName"):
            kserve.predictor_service(small_spec(), kserve.MODE_KNATIVE)


class TestWhatKueueCharges:
    """Kueue 0.19.2 charges a pod max(sum of containers, each init container) + overhead
    (pkg/workload/workload.go, resource.PodRequests): the ClusterQueue's per-GPU CPU and memory
    must hold exactly one predictor pod per GPU it reserves."""

    @staticmethod
    def quota_share(spec) -> tuple[int, int]:
        queue = render_cluster_queue(
            TenantQueueSpec("acme", "tenant-acme", "acme", "acme-queue", "", (FlavorQuotaSpec(spec.flavor, 8),))
        )
        (group,) = queue["spec"]["resourceGroups"]
        (flavor,) = [f for f in group["flavors"] if f["name"] == spec.flavor.name]
        quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
        return int(quota["cpu"]) * 1000 // 8 * spec.gpus_per_replica, kserve._bytes(quota["memory"]) // 8 * (
            spec.gpus_per_replica
        )

    @pytest.mark.parametrize("platform", [STANDARD, KNATIVE], ids=["standard", "knative"])
    @pytest.mark.parametrize(
        "spec", [small_spec(), s3_spec(), small_spec(model_source="pvc://weights/qwen")], ids=["hf", "s3", "pvc"]
    )
    def test_a_predictor_pod_costs_its_gpus_share_of_the_quota(self, spec, platform) -> None:
        assert kserve.pod_requests(spec, platform) == self.quota_share(spec)

    def test_the_storage_initializer_is_smaller_than_the_engine(self) -> None:
        cpu, memory = kserve.pod_requests(small_spec(model_source="s3://m/x", flavor=L4), STANDARD)
        assert cpu > kserve.STORAGE_INITIALIZER_CPU_MILLIS and memory > kserve.STORAGE_INITIALIZER_MEMORY_BYTES


def test_the_portals_stamps_are_the_annotations_the_install_keeps_off_the_pod_template() -> None:
    """KServe copies InferenceService annotations onto the pod template unless listed in
    `serviceAnnotationDisallowedList` (components/predictor.go): PORTAL_ANNOTATIONS is that list."""
    isvc = render(small_spec())
    own = set(isvc["metadata"]["annotations"])
    stamp(isvc, small_spec())
    from runtime.manifests.common import ANNOTATION_EXPOSURE

    assert set(isvc["metadata"]["annotations"]) - own | {ANNOTATION_EXPOSURE} == set(kserve.PORTAL_ANNOTATIONS)


class TestStatusInStandardMode:
    def test_the_deployments_progress_deadline_is_not_a_failure(self) -> None:
        """KServe reports the Deployment's fixed 600 s deadline as PredictorReady=False
        (PropagateRawStatus); the Deployment keeps going, so the portal waits."""
        condition = {
            "type": "PredictorReady",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": 'ReplicaSet "qwen-small-predictor-5c9" has timed out progressing.',
        }
        obj = {**render(small_spec()), "status": {"deploymentMode": "Standard", "conditions": [condition]}}
        result = kserve.kserve_status(obj)
        assert (result["failed"], result["reason"]) == (False, "ProgressDeadlineExceeded")
        obj["status"]["deploymentMode"] = "Knative"  # a Knative revision past its deadline has failed
        assert kserve.kserve_status(obj)["failed"] is True


def workload(name: str, pod_uid: str, created: str, *conditions: str) -> dict:
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "ownerReferences": [{"kind": "Pod", "name": name[4:], "uid": pod_uid}],
        },
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }


class TestWorkloadOfADeployment:
    PODS = [{"metadata": {"uid": "p1"}}, {"metadata": {"uid": "p2"}}, {"metadata": {"uid": "p3"}}]

    def test_only_the_workloads_its_pods_own(self) -> None:
        mine = workload("pod-a-1", "p1", "2026-01-01T00:00:00Z", "Admitted")
        other = workload("pod-x-1", "zz", "2026-01-01T00:00:00Z")
        assert pod_workloads([mine, other], self.PODS) == [mine]

    def test_the_first_waiting_one_tells_the_story(self) -> None:
        admitted = workload("pod-a-1", "p1", "2026-01-01T00:00:00Z", "QuotaReserved", "Admitted")
        later = workload("pod-c-1", "p3", "2026-01-01T00:02:00Z")
        first = workload("pod-b-1", "p2", "2026-01-01T00:01:00Z")
        assert deployment_workload([admitted, later, first]) is first

    def test_all_admitted_the_newest_live_one(self) -> None:
        old = workload("pod-a-1", "p1", "2026-01-01T00:00:00Z", "Admitted")
        new = workload("pod-b-1", "p2", "2026-01-01T00:01:00Z", "Admitted")
        finished = workload("pod-c-1", "p3", "2026-01-01T00:02:00Z", "Finished")
        assert deployment_workload([old, new, finished]) is new
        assert deployment_workload([]) is None
