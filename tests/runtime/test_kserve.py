"""The kserve backend: golden files, the real KServe CRD schema, and what each field is for.

Regenerate the golden files after an intended change with
`UPDATE_GOLDEN=1 pytest tests/runtime/test_kserve.py` and review the diff.
"""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.manifests import kserve
from runtime.manifests.common import LABEL_QUEUE_NAME, deployment_labels
from runtime.spec import (
    DeploymentSpec,
    EngineOptions,
    FlavorSpec,
    PlatformSpec,
    RenderError,
    Toleration,
)
from tests.support.crd import SchemaError, assert_valid

GOLDEN = Path(__file__).parent / "golden"

H100 = FlavorSpec(
    name="h100-sxm",
    gpu_model="H100 SXM5",
    accelerator_type="H100",
    gpu_memory_gib=80,
    gpus_per_node=8,
    cpu_per_gpu=12,
    memory_gib_per_gpu=120,
    node_labels=(("nvidia.com/gpu.product", "H100-SXM5"),),
    tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists"),),
)
L4 = FlavorSpec(
    name="l4",
    gpu_model="L4",
    accelerator_type="L4",
    gpu_memory_gib=24,
    gpus_per_node=4,
    node_labels=(("nvidia.com/gpu.product", "NVIDIA-L4"),),
)
# The cases of this module are KServe's Knative mode (concurrency autoscaling, scale to zero);
# Standard mode, the default, has its own in test_kserve_standard.py.
PLATFORM = PlatformSpec(kserve_deployment_mode="Knative")


def small_spec(**changes: Any) -> DeploymentSpec:
    """One L4, one replica, a Hugging Face model, no secret."""
    spec = DeploymentSpec(
        deployment_id=7,
        name="qwen-small",
        namespace="tenant-acme",
        tenant_slug="acme",
        queue_name="acme-queue",
        model_source="Qwen/Qwen2.5-0.5B-Instruct",
        served_model_name="qwen-0.5b",
        flavor=L4,
        backend="kserve",
    )
    return replace(spec, **changes)


def large_spec(**changes: Any) -> DeploymentSpec:
    """A full 8-GPU node per replica, PVC weights, every engine option set, autoscaling."""
    spec = DeploymentSpec(
        deployment_id=42,
        name="llama-70b",
        namespace="tenant-acme",
        tenant_slug="acme",
        queue_name="acme-queue",
        model_source="pvc://weights/meta/llama-3.3-70b",
        served_model_name="llama-70b",
        flavor=H100,
        tensor_parallel_size=4,
        pipeline_parallel_size=2,
        min_replicas=1,
        max_replicas=3,
        target_ongoing_requests=32,
        engine=EngineOptions(
            max_model_len=32768,
            gpu_memory_utilization=0.92,
            enable_chunked_prefill=False,
            max_num_batched_tokens=8192,
            quantization="fp8",
            dtype="bfloat16",
            trust_remote_code=True,
        ),
        hf_token_secret="hf-token",
        backend="kserve",
    )
    return replace(spec, **changes)


def scale_to_zero_spec(**changes: Any) -> DeploymentSpec:
    """S3 weights, idle deployments go to zero pods."""
    return small_spec(
        name="mistral-s3",
        deployment_id=9,
        model_source="s3://models/mistral-7b-instruct",
        served_model_name="mistral-7b",
        min_replicas=0,
        max_replicas=2,
        target_ongoing_requests=8,
        **changes,
    )


def predictor(isvc: dict[str, Any]) -> dict[str, Any]:
    return isvc["spec"]["predictor"]


def container(isvc: dict[str, Any]) -> dict[str, Any]:
    (only,) = predictor(isvc)["containers"]
    return only


def env(isvc: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item for item in container(isvc)["env"]}


def render(spec: DeploymentSpec, platform: PlatformSpec = PLATFORM) -> dict[str, Any]:
    return kserve.render_inferenceservice(spec, platform)


# ---------------------------------------------------------------------------------------------
# Golden files
# ---------------------------------------------------------------------------------------------

GOLDEN_CASES = {
    "small": lambda: render(small_spec()),
    "large": lambda: render(large_spec()),
    "scale-to-zero": lambda: render(scale_to_zero_spec()),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_rendered_inferenceservice_matches_golden_file(case: str) -> None:
    rendered = GOLDEN_CASES[case]()
    path = GOLDEN / f"kserve-knative-{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(yaml.safe_dump(rendered, sort_keys=False, width=100))
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 and review it"
    assert rendered == yaml.safe_load(path.read_text())


def test_rendering_is_deterministic_and_shares_no_mutable_state() -> None:
    first = render(large_spec())
    snapshot = copy.deepcopy(first)
    container(first)["env"].append({"name": "X", "value": "1"})
    first["metadata"]["labels"]["x"] = "y"
    predictor(first)["annotations"]["x"] = "y"
    assert render(large_spec()) == snapshot


# ---------------------------------------------------------------------------------------------
# Real CRD schema
# ---------------------------------------------------------------------------------------------

SCHEMA_CASES = {
    **GOLDEN_CASES,
    "no_cache_pvc": lambda: render(small_spec(), replace(PLATFORM, model_cache_pvc=None)),
    "hf_with_token": lambda: render(small_spec(hf_token_secret="hf-token")),
    "pvc_whole_claim": lambda: render(small_spec(model_source="pvc://weights")),
    "tp2_pp2_full_l4_node": lambda: render(
        small_spec(tensor_parallel_size=2, pipeline_parallel_size=2, max_replicas=4)
    ),
}


class TestCrdSchema:
    @pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
    def test_rendered_inferenceservice_is_valid_and_nothing_would_be_pruned(self, case: str) -> None:
        assert_valid(SCHEMA_CASES[case]())

    def test_validator_catches_a_misspelt_predictor_field(self) -> None:
        isvc = render(small_spec())
        predictor(isvc)["scaleMetrics"] = predictor(isvc).pop("scaleMetric")
        with pytest.raises(SchemaError, match=r"spec\.predictor\.scaleMetrics"):
            assert_valid(isvc)

    def test_validator_catches_an_unsupported_scale_metric(self) -> None:
        isvc = render(small_spec())
        predictor(isvc)["scaleMetric"] = "ongoing_requests"
        with pytest.raises(SchemaError, match="scaleMetric"):
            assert_valid(isvc)

    def test_validator_catches_a_string_replica_count(self) -> None:
        isvc = render(small_spec())
        predictor(isvc)["minReplicas"] = "0"
        with pytest.raises(SchemaError, match="minReplicas"):
            assert_valid(isvc)


# ---------------------------------------------------------------------------------------------
# Behaviour
# ---------------------------------------------------------------------------------------------


class TestVllmArgs:
    def test_every_engine_option_becomes_its_vllm_flag(self) -> None:
        assert container(render(large_spec()))["args"] == [
            "--model=/mnt/models",
            "--served-model-name=llama-70b",
            "--port=8080",
            "--tensor-parallel-size=4",
            "--pipeline-parallel-size=2",
            "--max-model-len=32768",
            "--gpu-memory-utilization=0.92",
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens=8192",
            "--quantization=fp8",
            "--dtype=bfloat16",
            "--trust-remote-code",
        ]

    def test_unset_options_are_left_to_vllm_defaults(self) -> None:
        args = container(render(small_spec()))["args"]
        flags = {arg.split("=")[0] for arg in args}
        assert not flags & {"--max-model-len", "--max-num-batched-tokens", "--quantization"}
        assert "--trust-remote-code" not in args
        assert "--enable-chunked-prefill" in args
        assert "--dtype=auto" in args

    def test_hugging_face_id_goes_to_vllm_with_the_model_cache(self) -> None:
        isvc = render(small_spec())
        assert "--model=Qwen/Qwen2.5-0.5B-Instruct" in container(isvc)["args"]
        assert "STORAGE_URI" not in env(isvc)
        assert env(isvc)["HF_HOME"]["value"] == PLATFORM.hf_cache_path
        cache = {"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}
        assert cache in predictor(isvc)["volumes"]
        assert {"name": "model-cache", "mountPath": PLATFORM.hf_cache_path} in container(isvc)["volumeMounts"]

    @pytest.mark.parametrize("source", ["s3://models/mistral-7b-instruct", "pvc://weights/meta/llama"])
    def test_s3_and_pvc_sources_go_to_kserve_storage_at_mnt_models(self, source: str) -> None:
        isvc = render(small_spec(model_source=source))
        assert env(isvc)["STORAGE_URI"] == {"name": "STORAGE_URI", "value": source}
        assert "--model=/mnt/models" in container(isvc)["args"]
        # KServe mounts the weights; an HF cache would be an unused PVC mount.
        assert "HF_HOME" not in env(isvc)
        assert [v["name"] for v in predictor(isvc)["volumes"]] == ["dshm"]

    def test_container_is_named_for_kserve_storage_initializer(self) -> None:
        # KServe looks up STORAGE_URI and mounts /mnt/models on this container name only.
        assert container(render(scale_to_zero_spec()))["name"] == "kserve-container"

    @pytest.mark.parametrize("source", ["gs://bucket/model", "pvc://Bad_Claim/x"])
    def test_unsupported_or_invalid_sources_are_refused(self, source: str) -> None:
        with pytest.raises(RenderError, match=r"model source"):
            render(small_spec(model_source=source))

    def test_runs_the_platform_vllm_image_as_the_openai_server(self) -> None:
        platform = replace(PLATFORM, vllm_image="registry.local/vllm:pinned")
        c = container(render(small_spec(), platform))
        assert c["image"] == "registry.local/vllm:pinned"
        assert c["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]


class TestLabelsAndScheduling:
    def test_labels_identify_the_deployment_and_name_the_kueue_queue(self) -> None:
        spec = small_spec()
        labels = render(spec)["metadata"]["labels"]
        assert labels == {**deployment_labels(spec), LABEL_QUEUE_NAME: "acme-queue"}

    def test_object_lives_in_the_tenant_namespace(self) -> None:
        meta = render(small_spec())["metadata"]
        assert (meta["name"], meta["namespace"]) == ("qwen-small", "tenant-acme")

    def test_the_predictor_selects_its_flavor_by_the_portal_label_and_tolerates_only_the_gpu_taint(self) -> None:
        # Without the selector Kueue may admit the pods into another GPU flavor's quota; the
        # flavor's own tolerations are Kueue's to inject.
        pred = predictor(render(large_spec()))
        assert pred["nodeSelector"] == {"llm-portal.io/flavor": "h100-sxm"}
        assert pred["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        for field in ("affinity", "nodeName"):
            assert field not in pred

    def test_a_gpu_flavor_without_node_labels_of_its_own_is_pinned_by_the_portal_label(self) -> None:
        pred = predictor(render(small_spec(flavor=replace(L4, node_labels=()))))
        assert pred["nodeSelector"] == {"llm-portal.io/flavor": "l4"}

    def test_name_kserve_would_refuse_is_refused(self) -> None:
        with pytest.raises(RenderError, match="at most 47"):
            render(small_spec(name="m" * 48))
        with pytest.raises(RenderError, match="DNS-1035"):
            render(small_spec(name="7b-model"))
        assert render(small_spec(name="m" * 47))["metadata"]["name"] == "m" * 47


class TestResources:
    def test_gpus_are_tp_times_pp_with_cpu_and_memory_per_gpu(self) -> None:
        resources = container(render(large_spec()))["resources"]
        expected = {"nvidia.com/gpu": 8, "cpu": 96, "memory": "960Gi"}
        # Knative's queue-proxy requests 25m of the flavor's CPU share (knative/serving v0.48.1
        # pkg/deployment/config.go), so the pod as a whole asks what the quota holds per GPU.
        assert resources == {"requests": {**expected, "cpu": "95975m"}, "limits": expected}
        assert kserve.pod_requests(large_spec(), PLATFORM) == (96_000, 960 * 2**30)

    def test_replica_larger_than_a_node_needs_the_kuberay_backend(self) -> None:
        with pytest.raises(RenderError, match=r"16 GPUs per replica.*h100-sxm.*8.*kuberay"):
            render(large_spec(tensor_parallel_size=8, pipeline_parallel_size=2))
        with pytest.raises(RenderError, match="tensor_parallel_size 8 does not fit in one l4 node"):
            render(small_spec(tensor_parallel_size=8))

    def test_shared_memory_is_a_memory_backed_dev_shm(self) -> None:
        isvc = render(small_spec(), replace(PLATFORM, shm_size_gi=64))
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in (predictor(isvc)["volumes"])
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container(isvc)["volumeMounts"]

    def test_shared_memory_never_drops_below_the_minimum(self) -> None:
        isvc = render(small_spec(), replace(PLATFORM, shm_size_gi=1))
        assert predictor(isvc)["volumes"][0]["emptyDir"]["sizeLimit"] == "16Gi"


class TestScalingAndMetrics:
    def test_concurrency_autoscaling_between_the_replica_bounds(self) -> None:
        pred = predictor(render(large_spec()))
        assert (pred["minReplicas"], pred["maxReplicas"]) == (1, 3)
        assert (pred["scaleMetric"], pred["scaleTarget"]) == ("concurrency", 32)
        # Knative would otherwise aim at 70% of the target.
        assert pred["annotations"][kserve.ANNOTATION_TARGET_UTILIZATION] == "100"

    def test_min_replicas_zero_scales_to_zero_in_knative_mode(self) -> None:
        isvc = render(scale_to_zero_spec())
        assert predictor(isvc)["minReplicas"] == 0
        assert predictor(isvc)["maxReplicas"] == 2
        # KServe v0.20.0's current name; "Serverless" is its legacy alias (pkg/constants, ParseDeploymentMode).
        assert isvc["metadata"]["annotations"] == {"serving.kserve.io/deploymentMode": "Knative"}

    def test_fixed_size_deployment_is_still_knative(self) -> None:
        # The configured mode is written explicitly: a cluster default of Standard mode must not
        # change how a deployment behaves.
        isvc = render(small_spec())
        assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Knative"
        assert (predictor(isvc)["minReplicas"], predictor(isvc)["maxReplicas"]) == (1, 1)

    @pytest.mark.parametrize(("low", "high"), [(2, 1), (0, 0)])
    def test_impossible_replica_bounds_are_refused(self, low: int, high: int) -> None:
        with pytest.raises(RenderError, match="max_replicas"):
            render(small_spec(min_replicas=low, max_replicas=high))

    def test_prometheus_scrapes_the_port_vllm_serves_metrics_on(self) -> None:
        isvc = render(small_spec())
        annotations = predictor(isvc)["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"
        port = int(annotations["prometheus.io/port"])
        assert container(isvc)["ports"] == [{"name": "http1", "containerPort": port, "protocol": "TCP"}]
        assert f"--port={port}" in container(isvc)["args"]

    def test_readiness_waits_for_the_engine_health_endpoint(self) -> None:
        probe = container(render(small_spec()))["readinessProbe"]
        assert probe["httpGet"] == {"path": "/health", "port": 8080}


class TestHuggingFaceToken:
    def test_token_comes_from_the_tenant_secret(self) -> None:
        assert env(render(large_spec()))["HF_TOKEN"] == {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}},
        }

    def test_no_token_without_a_secret(self) -> None:
        assert "HF_TOKEN" not in env(render(small_spec()))


# ---------------------------------------------------------------------------------------------
# Status
# ---------------------------------------------------------------------------------------------

T = "2026-11-30T10:00:00Z"
URL = "https://qwen-small-tenant-acme.models.example.com"


def cond(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    out = {"type": type_, "status": status, "lastTransitionTime": T}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def all_true() -> list[dict[str, Any]]:
    return [
        cond(t, "True")
        for t in (
            "IngressReady",
            "LatestDeploymentReady",
            "PredictorConfigurationReady",
            "PredictorReady",
            "PredictorRouteReady",
            "Ready",
            "RoutesReady",
        )
    ]


def with_status(status: dict[str, Any]) -> dict[str, Any]:
    """A rendered InferenceService with `status`, checked against the CRD's status schema."""
    obj = {**render(small_spec()), "status": status}
    assert_valid(obj)
    return obj


SERVING = {
    "conditions": all_true(),
    "url": URL,
    "address": {"url": "http://qwen-small.tenant-acme.svc.cluster.local"},
    "deploymentMode": "Serverless",
    "components": {
        "predictor": {
            "latestCreatedRevision": "qwen-small-predictor-00001",
            "latestReadyRevision": "qwen-small-predictor-00001",
            "url": "https://qwen-small-predictor-tenant-acme.models.example.com",
        }
    },
    "modelStatus": {
        "transitionStatus": "UpToDate",
        "states": {"activeModelState": "Loaded", "targetModelState": "Loaded"},
        "copies": {"failedCopies": 0, "totalCopies": 2},
    },
}


class TestKserveStatus:
    def test_no_status_yet_is_pending_and_unknown(self) -> None:
        assert kserve.kserve_status(render(small_spec())) == {
            "ready": None,
            "failed": False,
            "reason": "Pending",
            "message": "KServe has not reported a status yet",
            "url": None,
            "scaled_to_zero": False,
        }

    def test_serving_with_pods(self) -> None:
        assert kserve.kserve_status(with_status(SERVING)) == {
            "ready": True,
            "failed": False,
            "reason": "Ready",
            "message": "",
            "url": URL,
            "scaled_to_zero": False,
        }

    def test_scaled_to_zero_is_ready_with_no_pods(self) -> None:
        # What KServe writes when Knative has scaled the revision to zero: the Knative
        # Service stays Ready, totalCopies (omitempty) disappears, the target goes Pending.
        status = copy.deepcopy(SERVING)
        status["modelStatus"] = {
            "transitionStatus": "InProgress",
            "states": {"activeModelState": "Loaded", "targetModelState": "Pending"},
            "copies": {"failedCopies": 0},
        }
        result = kserve.kserve_status(with_status(status))
        assert result["ready"] is True
        assert result["scaled_to_zero"] is True
        assert result["failed"] is False
        assert result["reason"] == "ScaledToZero"

    def test_raw_deployment_with_no_ready_pods_is_not_scaled_to_zero(self) -> None:
        status = copy.deepcopy(SERVING)
        status["deploymentMode"] = "RawDeployment"
        status["modelStatus"]["copies"] = {"failedCopies": 0}
        assert kserve.kserve_status(with_status(status))["scaled_to_zero"] is False

    def test_older_kserve_without_copies_is_not_called_scaled_to_zero(self) -> None:
        status = copy.deepcopy(SERVING)
        del status["modelStatus"]["copies"]
        assert kserve.kserve_status(with_status(status))["scaled_to_zero"] is False

    def test_starting_is_unknown_and_not_failed(self) -> None:
        status = {
            "conditions": [
                cond(
                    "PredictorConfigurationReady",
                    "Unknown",
                    "RevisionMissing",
                    "Configuration is waiting for a Revision to become ready.",
                ),
                cond("PredictorReady", "Unknown", "RevisionMissing"),
                cond("IngressReady", "Unknown"),
                cond("Ready", "Unknown", "RevisionMissing"),
            ],
            "deploymentMode": "Serverless",
            "modelStatus": {
                "transitionStatus": "InProgress",
                "states": {"activeModelState": "Pending", "targetModelState": "Loading"},
                "copies": {"failedCopies": 0},
            },
        }
        result = kserve.kserve_status(with_status(status))
        assert result["ready"] is None
        assert result["failed"] is False
        assert result["scaled_to_zero"] is False
        assert result["reason"] == "RevisionMissing"
        assert result["message"] == "Configuration is waiting for a Revision to become ready."
        assert result["url"] is None

    def test_model_load_failure_is_failed_with_kserve_failure_info(self) -> None:
        status = {
            "conditions": [
                cond("PredictorReady", "False", "RevisionFailed", "Container failed"),
                cond("Ready", "False", "RevisionFailed", "Container failed"),
            ],
            "deploymentMode": "Serverless",
            "modelStatus": {
                "transitionStatus": "BlockedByFailedLoad",
                "states": {"activeModelState": "Pending", "targetModelState": "FailedToLoad"},
                "lastFailureInfo": {
                    "reason": "ModelLoadFailed",
                    "message": "torch.OutOfMemoryError: CUDA out of memory",
                    "exitCode": 1,
                },
                "copies": {"failedCopies": 1},
            },
        }
        result = kserve.kserve_status(with_status(status))
        assert result["failed"] is True
        assert result["ready"] is False
        assert result["reason"] == "ModelLoadFailed"
        assert "CUDA out of memory" in result["message"]
        assert "exit code 1" in result["message"]

    def test_failed_revision_is_failed_with_the_most_specific_condition(self) -> None:
        message = 'Revision "qwen-small-predictor-00001" failed: ProgressDeadlineExceeded'
        status = {
            "conditions": [
                cond("IngressReady", "True"),
                cond("PredictorConfigurationReady", "False", "RevisionFailed", message),
                cond("PredictorReady", "False", "RevisionFailed", message),
                cond("Ready", "False", "RevisionFailed", message),
            ],
            "deploymentMode": "Serverless",
            "modelStatus": {"transitionStatus": "InProgress"},
        }
        result = kserve.kserve_status(with_status(status))
        assert (result["failed"], result["ready"]) == (True, False)
        assert (result["reason"], result["message"]) == ("RevisionFailed", message)

    def test_a_refused_pod_template_is_failed(self) -> None:
        message = "admission webhook denied: persistentVolumeClaim not enabled"
        status = {
            "conditions": [
                cond("PredictorReady", "False", "ReconcileFailed", message),
                cond("Ready", "False", "ReconcileFailed", message),
            ],
            "modelStatus": {"transitionStatus": "InProgress"},
        }
        result = kserve.kserve_status(with_status(status))
        assert result["failed"] is True
        assert result["message"] == message

    def test_stopped_is_not_ready_but_not_failed(self) -> None:
        status = {
            "conditions": [
                cond("PredictorReady", "False", "Stopped"),
                cond("Ready", "False", "Stopped"),
            ],
            "deploymentMode": "Serverless",
            "modelStatus": {"transitionStatus": "UpToDate"},
        }
        result = kserve.kserve_status(with_status(status))
        assert (result["ready"], result["failed"], result["reason"]) == (False, False, "Stopped")

    def test_url_falls_back_to_the_cluster_local_address(self) -> None:
        status = copy.deepcopy(SERVING)
        del status["url"]
        assert kserve.kserve_status(with_status(status))["url"] == ("http://qwen-small.tenant-acme.svc.cluster.local")

    def test_status_fixtures_are_checked_against_the_schema(self) -> None:
        # Guards the fixtures above: a status KServe could not write is refused.
        with pytest.raises(SchemaError, match="transitionStatus"):
            with_status({"modelStatus": {"transitionStatus": "Failed"}})
