"""Manifests: golden files, the real CRD schemas, and the behaviour each field is there for.

Regenerate the golden files after an intended change with
`UPDATE_GOLDEN=1 pytest tests/runtime/test_manifests.py` and review the diff.
"""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime import manifests
from runtime.manifests.common import (
    ANNOTATION_ELASTIC_JOB,
    LABEL_DEPLOYMENT_ID,
    LABEL_FLAVOR,
    LABEL_MANAGED_BY,
    LABEL_QUEUE_NAME,
    LABEL_TENANT,
)
from runtime.spec import (
    DeploymentSpec,
    EngineOptions,
    FlavorQuotaSpec,
    FlavorSpec,
    PlatformSpec,
    RenderError,
    TenantQueueSpec,
    Toleration,
)
from tests.support.crd import SchemaError, assert_valid, served_schema, unknown_fields, validate

GOLDEN = Path(__file__).parent / "golden"


class _GoldenDumper(yaml.SafeDumper):
    """Writes multi-line strings (serveConfigV2) as literal blocks so diffs stay readable."""


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_GoldenDumper.add_representer(str, _str_presenter)

H100 = FlavorSpec(
    name="h100-sxm",
    gpu_model="H100 SXM5",
    accelerator_type="H100",
    gpu_memory_gib=80,
    gpus_per_node=8,
    cpu_per_gpu=12,
    memory_gib_per_gpu=120,
    node_labels=(("cloud.example.com/gpu", "h100"), ("nvidia.com/gpu.product", "H100-SXM5")),
    tolerations=(
        Toleration(key="nvidia.com/gpu", operator="Exists", value="ignored"),
        Toleration(key="dedicated", operator="Equal", value="inference", effect="NoExecute"),
    ),
)
L4 = FlavorSpec(
    name="l4",
    gpu_model="L4",
    accelerator_type="L4",
    gpu_memory_gib=24,
    gpus_per_node=4,
    node_labels=(("nvidia.com/gpu.product", "NVIDIA-L4"),),
)
PLATFORM = PlatformSpec()


def small_spec(**changes: Any) -> DeploymentSpec:
    """One L4, one replica, a Hugging Face model, no secret: the simplest deployment."""
    spec = DeploymentSpec(
        deployment_id=7,
        name="qwen-small",
        namespace="tenant-acme",
        tenant_slug="acme",
        queue_name="acme-queue",
        model_source="Qwen/Qwen2.5-0.5B-Instruct",
        served_model_name="qwen-0.5b",
        flavor=L4,
    )
    return replace(spec, **changes)


def large_spec(**changes: Any) -> DeploymentSpec:
    """TP 8 x PP 2 on 8-GPU nodes (two pods per replica), autoscaling, PVC weights, token."""
    spec = DeploymentSpec(
        deployment_id=42,
        name="llama-405b",
        namespace="tenant-acme",
        tenant_slug="acme",
        queue_name="acme-queue",
        model_source="pvc://weights/meta/llama-3.1-405b-fp8",
        served_model_name="llama-405b",
        flavor=H100,
        tensor_parallel_size=8,
        pipeline_parallel_size=2,
        min_replicas=1,
        max_replicas=3,
        target_ongoing_requests=32,
        engine=EngineOptions(max_model_len=32768, quantization="fp8", max_num_batched_tokens=8192),
        hf_token_secret="hf-token",
    )
    return replace(spec, **changes)


def tenant_queue(**changes: Any) -> TenantQueueSpec:
    spec = TenantQueueSpec(
        tenant_slug="acme",
        namespace="tenant-acme",
        cluster_queue="acme",
        local_queue="acme-queue",
        cohort="shared-gpus",
        quotas=(
            FlavorQuotaSpec(flavor=H100, nominal_gpus=16, borrowing_limit_gpus=8),
            FlavorQuotaSpec(flavor=L4, nominal_gpus=4, lending_limit_gpus=2),
        ),
    )
    return replace(spec, **changes)


def worker_group(rayservice: dict[str, Any]) -> dict[str, Any]:
    (group,) = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    return group


def worker_container(rayservice: dict[str, Any]) -> dict[str, Any]:
    (container,) = worker_group(rayservice)["template"]["spec"]["containers"]
    return container


def env_names(container: dict[str, Any]) -> list[str]:
    return [item["name"] for item in container.get("env", [])]


# ---------------------------------------------------------------------------------------------
# Golden files
# ---------------------------------------------------------------------------------------------

GOLDEN_CASES = {
    "rayservice_small": lambda: manifests.render_rayservice(small_spec(), PLATFORM),
    "rayservice_large": lambda: manifests.render_rayservice(large_spec(), PLATFORM),
    "namespace": lambda: manifests.render_namespace(tenant_queue()),
    "resourceflavor_h100": lambda: manifests.render_resource_flavor(H100),
    "resourceflavor_cpu": lambda: manifests.render_cpu_resource_flavor(
        replace(PLATFORM, cpu_flavor_node_labels=(("node-role.example.com/cpu", "true"),))
    ),
    "clusterqueue": lambda: manifests.render_cluster_queue(tenant_queue(), PLATFORM),
    "localqueue": lambda: manifests.render_local_queue(tenant_queue()),
    "cohort": lambda: manifests.render_cohort("shared-gpus"),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_rendered_object_matches_golden_file(case: str) -> None:
    rendered = GOLDEN_CASES[case]()
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(yaml.dump(rendered, Dumper=_GoldenDumper, sort_keys=False, width=100))
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 and review it"
    assert rendered == yaml.safe_load(path.read_text())


def test_rendering_is_deterministic() -> None:
    first = manifests.render_serve_config(large_spec())
    assert first == manifests.render_serve_config(large_spec())
    assert manifests.render_rayservice(large_spec(), PLATFORM) == manifests.render_rayservice(large_spec(), PLATFORM)


# ---------------------------------------------------------------------------------------------
# Real CRD schemas
# ---------------------------------------------------------------------------------------------

SCHEMA_CASES = {
    **{k: v for k, v in GOLDEN_CASES.items() if k != "namespace"},
    "rayservice_s3_no_cache": lambda: manifests.render_rayservice(
        small_spec(model_source="s3://bucket/models/qwen", hf_token_secret="tok"),
        replace(PLATFORM, model_cache_pvc=None),
    ),
    "clusterqueue_no_cohort": lambda: manifests.render_cluster_queue(tenant_queue(cohort="")),
    "clusterqueue_no_quota": lambda: manifests.render_cluster_queue(tenant_queue(quotas=())),
    "resourceflavor_bare": lambda: manifests.render_resource_flavor(L4),
}


class TestCrdSchemas:
    @pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
    def test_rendered_object_is_valid_and_nothing_would_be_pruned(self, case: str) -> None:
        assert_valid(SCHEMA_CASES[case]())

    def test_validator_rejects_a_field_the_api_server_would_prune(self) -> None:
        rayservice = manifests.render_rayservice(small_spec(), PLATFORM)
        worker_group(rayservice)["template"]["spec"]["nodeSelectr"] = {"a": "b"}
        with pytest.raises(SchemaError, match=r"workerGroupSpecs\[0\]\.template\.spec\.nodeSelectr"):
            assert_valid(rayservice)

    def test_validator_rejects_a_wrong_type(self) -> None:
        rayservice = manifests.render_rayservice(small_spec(), PLATFORM)
        worker_group(rayservice)["minReplicas"] = "one"
        with pytest.raises(SchemaError, match="minReplicas"):
            assert_valid(rayservice)

    def test_validator_rejects_a_missing_required_field(self) -> None:
        queue = manifests.render_cluster_queue(tenant_queue())
        del queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
        with pytest.raises(SchemaError, match="nominalQuota"):
            assert_valid(queue)

    def test_validator_rejects_the_v1beta1_cohort_field_name_in_v1beta2(self) -> None:
        queue = manifests.render_cluster_queue(tenant_queue())
        queue["spec"]["cohort"] = queue["spec"].pop("cohortName")
        with pytest.raises(SchemaError, match=r"spec\.cohort\b"):
            assert_valid(queue)

    def test_validator_rejects_an_enum_violation(self) -> None:
        queue = manifests.render_cluster_queue(tenant_queue())
        queue["spec"]["preemption"]["withinClusterQueue"] = "Any"
        with pytest.raises(SchemaError, match="withinClusterQueue"):
            assert_valid(queue)

    def test_validator_rejects_an_unknown_metadata_field(self) -> None:
        queue = manifests.render_local_queue(tenant_queue())
        queue["metadata"]["label"] = {"x": "y"}
        with pytest.raises(SchemaError, match=r"metadata\.label\b"):
            assert_valid(queue)

    def test_int_or_string_quantities_accept_both_forms_but_not_garbage(self) -> None:
        schema = served_schema(manifests.KUEUE_API_VERSION, "ClusterQueue")
        queue = manifests.render_cluster_queue(tenant_queue())
        resource = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
        for good in (16, "16", "1500m", "64Gi"):
            resource["nominalQuota"] = good
            validate(queue, schema)
        resource["nominalQuota"] = "sixteen"
        with pytest.raises(SchemaError, match="nominalQuota"):
            validate(queue, schema)

    def test_unknown_fields_walks_lists_and_maps(self) -> None:
        schema = served_schema(manifests.RAY_API_VERSION, "RayService")
        rayservice = manifests.render_rayservice(large_spec(), PLATFORM)
        worker_container(rayservice)["env"][0]["valueFromm"] = "x"
        # rayStartParams is a map (additionalProperties): arbitrary keys are legitimate.
        worker_group(rayservice)["rayStartParams"]["anything-goes"] = "1"
        assert unknown_fields(rayservice, schema) == [
            "spec.rayClusterConfig.workerGroupSpecs[0].template.spec.containers[0].env[0].valueFromm"
        ]

    def test_an_unserved_version_is_refused(self) -> None:
        with pytest.raises(SchemaError, match="no such version"):
            served_schema("kueue.x-k8s.io/v1alpha9", "ClusterQueue")


# ---------------------------------------------------------------------------------------------
# Ray Serve LLM config
# ---------------------------------------------------------------------------------------------


class TestLlmConfig:
    def test_it_names_the_model_and_its_source(self) -> None:
        config = manifests.llm_config(small_spec())
        assert config["model_loading_config"] == {
            "model_id": "qwen-0.5b",
            "model_source": "Qwen/Qwen2.5-0.5B-Instruct",
        }
        assert config["accelerator_type"] == "L4"

    @pytest.mark.parametrize("accelerator", ["CPU", ""])
    def test_a_cpu_only_flavor_gives_ray_no_accelerator_type(self, accelerator: str) -> None:
        # Ray 2.60.0 refuses "CPU" as a name and any accelerator_type on a CPU-only config
        # (python/ray/llm/_internal/serve/core/configs/llm_config.py; runtime.accelerators).
        config = manifests.llm_config(small_spec(flavor=replace(L4, accelerator_type=accelerator)))
        assert "accelerator_type" not in config

    def test_an_s3_source_is_passed_through_as_the_uri(self) -> None:
        config = manifests.llm_config(small_spec(model_source="s3://bucket/models/qwen"))
        assert config["model_loading_config"]["model_source"] == "s3://bucket/models/qwen"

    def test_a_pvc_source_points_at_the_mounted_path(self) -> None:
        config = manifests.llm_config(large_spec())
        assert config["model_loading_config"]["model_source"] == ("/models/weights/meta/llama-3.1-405b-fp8")

    def test_a_pvc_source_without_path_is_the_claim_root(self) -> None:
        config = manifests.llm_config(small_spec(model_source="pvc://weights"))
        assert config["model_loading_config"]["model_source"] == "/models/weights"

    def test_unset_engine_options_are_left_to_vllm(self) -> None:
        kwargs = manifests.llm_config(small_spec())["engine_kwargs"]
        assert kwargs == {
            "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1,
            "gpu_memory_utilization": 0.9,
            "enable_chunked_prefill": True,
            "dtype": "auto",
            "trust_remote_code": False,
        }

    def test_set_engine_options_reach_vllm(self) -> None:
        kwargs = manifests.llm_config(large_spec())["engine_kwargs"]
        assert kwargs["max_model_len"] == 32768
        assert kwargs["quantization"] == "fp8"
        assert kwargs["max_num_batched_tokens"] == 8192
        assert (kwargs["tensor_parallel_size"], kwargs["pipeline_parallel_size"]) == (8, 2)

    def test_autoscaling_bounds_follow_the_spec(self) -> None:
        autoscaling = manifests.llm_config(large_spec())["deployment_config"]["autoscaling_config"]
        assert autoscaling == {"min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 32}

    def test_serve_config_parses_back_to_the_llm_config(self) -> None:
        spec = large_spec()
        parsed = yaml.safe_load(manifests.render_serve_config(spec))
        (app,) = parsed["applications"]
        assert app["import_path"] == "ray.serve.llm:build_openai_app"
        assert app["route_prefix"] == "/"
        assert app["name"] == manifests.SERVE_APP_NAME
        assert app["args"]["llm_configs"] == [manifests.llm_config(spec)]

    def test_rayservice_carries_the_same_serve_config(self) -> None:
        spec = large_spec()
        rayservice = manifests.render_rayservice(spec, PLATFORM)
        assert yaml.safe_load(rayservice["spec"]["serveConfigV2"]) == manifests.serve_config_v2(spec)


# ---------------------------------------------------------------------------------------------
# RayService
# ---------------------------------------------------------------------------------------------


class TestRenderRayService:
    def test_labels_identify_portal_tenant_deployment_and_queue(self) -> None:
        metadata = manifests.render_rayservice(small_spec(), PLATFORM)["metadata"]
        assert (metadata["name"], metadata["namespace"]) == ("qwen-small", "tenant-acme")
        assert metadata["labels"] == {
            LABEL_MANAGED_BY: "llm-portal",
            LABEL_TENANT: "acme",
            LABEL_DEPLOYMENT_ID: "7",
            LABEL_QUEUE_NAME: "acme-queue",
        }

    def test_pods_carry_portal_labels_but_not_the_queue_label(self) -> None:
        # A queue label on pods would make Kueue's pod integration admit them separately.
        rayservice = manifests.render_rayservice(small_spec(), PLATFORM)
        labels = worker_group(rayservice)["template"]["metadata"]["labels"]
        assert labels[LABEL_DEPLOYMENT_ID] == "7"
        assert LABEL_QUEUE_NAME not in labels

    def test_every_rayservice_is_an_elastic_job_with_the_autoscaler_fixed_size_too(self) -> None:
        # A worker-count change then moves the running RayCluster (runtime.backends.rayresize).
        for spec in (small_spec(), small_spec(max_replicas=2)):
            rendered = manifests.render_rayservice(spec, PLATFORM)
            assert rendered["metadata"]["annotations"] == {ANNOTATION_ELASTIC_JOB: "true"}
            assert rendered["spec"]["rayClusterConfig"]["enableInTreeAutoscaling"] is True

    def test_upgrade_strategy_never_doubles_the_gpus(self) -> None:
        rayservice = manifests.render_rayservice(small_spec(), PLATFORM)
        assert rayservice["spec"]["upgradeStrategy"] == {"type": "None"}

    def test_kueue_owned_fields_are_left_alone(self) -> None:
        rayservice = manifests.render_rayservice(large_spec(), PLATFORM)
        cluster = rayservice["spec"]["rayClusterConfig"]
        assert "suspend" not in rayservice["spec"]
        assert "suspend" not in cluster
        pod_specs = [cluster["headGroupSpec"]["template"]["spec"]] + [
            group["template"]["spec"] for group in cluster["workerGroupSpecs"]
        ]
        for pod_spec in pod_specs:
            assert "affinity" not in pod_spec
        # The flavor's tolerations are Kueue's to inject; workers tolerate only the GPU nodes'
        # taint themselves, and the head nothing, so it never lands on a tainted GPU node.
        head, worker = pod_specs
        assert "tolerations" not in head
        assert worker["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]

    def test_every_pod_selects_only_the_portal_label_of_its_flavor(self) -> None:
        # One key every flavor carries with its own value: Kueue >= 0.18.2 matches a selector only
        # on the keys of the flavor it tries, so the flavor's own keys would not rule others out.
        cpu_nodes = replace(PLATFORM, cpu_flavor_node_labels=(("node-role.example.com/cpu", "true"),))
        for platform in (PLATFORM, cpu_nodes):
            cluster = manifests.render_rayservice(large_spec(), platform)["spec"]["rayClusterConfig"]
            worker = worker_group({"spec": {"rayClusterConfig": cluster}})["template"]["spec"]
            assert worker["nodeSelector"] == {LABEL_FLAVOR: "h100-sxm"}
            assert cluster["headGroupSpec"]["template"]["spec"]["nodeSelector"] == {LABEL_FLAVOR: "portal-cpu"}
            # ...and the same value Kueue injects from the ResourceFlavor, so the two never clash.
            assert manifests.render_cpu_resource_flavor(platform)["spec"]["nodeLabels"][LABEL_FLAVOR] == "portal-cpu"
        assert manifests.render_resource_flavor(H100)["spec"]["nodeLabels"][LABEL_FLAVOR] == "h100-sxm"

    def test_a_gpu_flavor_without_labels_of_its_own_is_still_pinned(self) -> None:
        unlabelled = replace(L4, node_labels=())
        worker = worker_group(manifests.render_rayservice(small_spec(flavor=unlabelled), PLATFORM))
        assert worker["template"]["spec"]["nodeSelector"] == {LABEL_FLAVOR: "l4"}
        assert manifests.render_resource_flavor(unlabelled)["spec"]["nodeLabels"] == {LABEL_FLAVOR: "l4"}

    def test_head_takes_no_gpu_and_exposes_ray_ports(self) -> None:
        head = manifests.render_rayservice(small_spec(), PLATFORM)["spec"]["rayClusterConfig"]["headGroupSpec"]
        assert head["rayStartParams"]["num-gpus"] == "0"
        (container,) = head["template"]["spec"]["containers"]
        ports = {port["name"]: port["containerPort"] for port in container["ports"]}
        assert ports == {
            "gcs-server": 6379,
            "dashboard": 8265,
            "client": 10001,
            "serve": 8000,
            "metrics": 8080,
        }
        assert "nvidia.com/gpu" not in container["resources"]["limits"]
        assert container["resources"]["requests"] == {"cpu": "2", "memory": "8Gi"}

    def test_single_gpu_replica_is_one_pod_per_replica(self) -> None:
        group = worker_group(manifests.render_rayservice(small_spec(max_replicas=3), PLATFORM))
        assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 3)
        assert (
            worker_container({"spec": {"rayClusterConfig": {"workerGroupSpecs": [group]}}})["resources"]["limits"][
                "nvidia.com/gpu"
            ]
            == 1
        )

    def test_replica_larger_than_a_node_spans_whole_node_pods(self) -> None:
        rayservice = manifests.render_rayservice(large_spec(), PLATFORM)
        group = worker_group(rayservice)
        # 16 GPUs per replica on 8-GPU nodes: two pods per replica.
        assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 6)
        resources = worker_container(rayservice)["resources"]
        assert resources["requests"] == resources["limits"]
        assert resources["limits"] == {"nvidia.com/gpu": 8, "cpu": 96, "memory": "960Gi"}

    def test_tensor_parallel_wider_than_a_node_is_refused(self) -> None:
        with pytest.raises(RenderError, match="tensor_parallel_size 8 does not fit"):
            manifests.render_rayservice(small_spec(tensor_parallel_size=8), PLATFORM)

    def test_uneven_split_across_nodes_is_refused(self) -> None:
        with pytest.raises(RenderError, match="whole 4-GPU nodes"):
            manifests.render_rayservice(small_spec(tensor_parallel_size=2, pipeline_parallel_size=3), PLATFORM)

    def test_name_over_47_characters_is_refused(self) -> None:
        name = "a" * 48
        with pytest.raises(RenderError, match="at most 47"):
            manifests.render_rayservice(small_spec(name=name), PLATFORM)
        assert manifests.render_rayservice(small_spec(name="a" * 47), PLATFORM)["metadata"]["name"] == "a" * 47

    @pytest.mark.parametrize("name", ["Qwen_Small", "7b-chat-3"])
    def test_name_that_is_not_dns_1035_is_refused(self, name) -> None:
        with pytest.raises(RenderError, match="DNS-1035"):
            manifests.rayservice_name(name)

    def test_hf_token_env_only_when_a_secret_is_given(self) -> None:
        without = manifests.render_rayservice(small_spec(), PLATFORM)
        assert "HF_TOKEN" not in env_names(worker_container(without))
        (bare_head,) = without["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
        assert "HF_TOKEN" not in env_names(bare_head)

        with_secret = manifests.render_rayservice(small_spec(hf_token_secret="hf"), PLATFORM)
        (token,) = [e for e in worker_container(with_secret)["env"] if e["name"] == "HF_TOKEN"]
        assert token["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}
        (head,) = with_secret["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
        assert "HF_TOKEN" in env_names(head)

    def test_worker_has_nccl_settings_and_ptrace(self) -> None:
        platform = replace(PLATFORM, nccl_debug="INFO")
        container = worker_container(manifests.render_rayservice(small_spec(), platform))
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["NCCL_IB_DISABLE"] == "0"
        assert env["NCCL_NET_GDR_LEVEL"] == "2"
        assert env["NCCL_DEBUG"] == "INFO"
        assert container["securityContext"]["capabilities"]["add"] == ["SYS_PTRACE"]

    def test_shared_memory_is_a_memory_backed_volume_of_at_least_16gi(self) -> None:
        for shm, expected in ((16, "16Gi"), (4, "16Gi"), (64, "64Gi")):
            platform = replace(PLATFORM, shm_size_gi=shm)
            rayservice = manifests.render_rayservice(small_spec(), platform)
            volumes = {v["name"]: v for v in worker_group(rayservice)["template"]["spec"]["volumes"]}
            assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": expected}
            mounts = {m["name"]: m["mountPath"] for m in worker_container(rayservice)["volumeMounts"]}
            assert mounts["dshm"] == "/dev/shm"

    def test_model_cache_is_mounted_at_the_hf_cache_only_when_configured(self) -> None:
        rayservice = manifests.render_rayservice(small_spec(), PLATFORM)
        volumes = {v["name"]: v for v in worker_group(rayservice)["template"]["spec"]["volumes"]}
        assert volumes["model-cache"]["persistentVolumeClaim"] == {"claimName": "model-cache"}
        mounts = {m["name"]: m["mountPath"] for m in worker_container(rayservice)["volumeMounts"]}
        assert mounts["model-cache"] == PLATFORM.hf_cache_path

        bare = manifests.render_rayservice(small_spec(), replace(PLATFORM, model_cache_pvc=None))
        names = [v["name"] for v in worker_group(bare)["template"]["spec"]["volumes"]]
        assert names == ["dshm"]

    def test_pvc_model_source_is_mounted_read_only_under_models(self) -> None:
        rayservice = manifests.render_rayservice(large_spec(), PLATFORM)
        volumes = {v["name"]: v for v in worker_group(rayservice)["template"]["spec"]["volumes"]}
        assert volumes["model-source"]["persistentVolumeClaim"] == {
            "claimName": "weights",
            "readOnly": True,
        }
        (mount,) = [m for m in worker_container(rayservice)["volumeMounts"] if m["name"] == "model-source"]
        assert mount == {"name": "model-source", "mountPath": "/models/weights", "readOnly": True}

    def test_an_invalid_pvc_claim_is_refused(self) -> None:
        with pytest.raises(RenderError, match="valid PVC"):
            manifests.llm_config(small_spec(model_source="pvc:///no-claim"))

    def test_cluster_uses_the_platform_ray_version_and_image(self) -> None:
        platform = replace(PLATFORM, ray_version="2.99.0", ray_image="registry.local/ray:2.99.0")
        cluster = manifests.render_rayservice(small_spec(), platform)["spec"]["rayClusterConfig"]
        assert cluster["rayVersion"] == "2.99.0"
        assert worker_container({"spec": {"rayClusterConfig": cluster}})["image"] == ("registry.local/ray:2.99.0")


# ---------------------------------------------------------------------------------------------
# Kueue
# ---------------------------------------------------------------------------------------------


class TestRenderKueue:
    def test_namespace_carries_portal_labels(self) -> None:
        namespace = manifests.render_namespace(tenant_queue())
        assert (namespace["apiVersion"], namespace["kind"]) == ("v1", "Namespace")
        assert namespace["metadata"] == {
            "name": "tenant-acme",
            "labels": {LABEL_MANAGED_BY: "llm-portal", LABEL_TENANT: "acme"},
        }

    def test_resource_flavor_carries_node_labels_and_tolerations(self) -> None:
        flavor = manifests.render_resource_flavor(H100)
        assert flavor["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        assert flavor["spec"]["nodeLabels"] == {
            "cloud.example.com/gpu": "h100",
            "llm-portal.io/flavor": "h100-sxm",
            "nvidia.com/gpu.product": "H100-SXM5",
        }
        # CEL rule on ResourceFlavor: a value is forbidden with operator Exists.
        assert flavor["spec"]["tolerations"] == [
            {"operator": "Exists", "effect": "NoSchedule", "key": "nvidia.com/gpu"},
            {"operator": "Equal", "effect": "NoExecute", "key": "dedicated", "value": "inference"},
        ]

    def test_cluster_queue_quota_per_flavor_in_covered_resource_order(self) -> None:
        queue = manifests.render_cluster_queue(tenant_queue(), PLATFORM)
        (group,) = queue["spec"]["resourceGroups"]
        assert group["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
        cpu, h100, l4 = group["flavors"]
        # CEL rule: each flavor lists exactly the covered resources, in their order.
        for flavor in (cpu, h100, l4):
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
        # 16 GPUs x 12 CPU per GPU; 16 x 120Gi: the workers only, heads go to the CPU flavor.
        assert h100 == {
            "name": "h100-sxm",
            "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": 16, "borrowingLimit": 8},
                {"name": "cpu", "nominalQuota": 192, "borrowingLimit": 96},
                {"name": "memory", "nominalQuota": "1920Gi", "borrowingLimit": "960Gi"},
            ],
        }
        # First, no GPUs, one head per nominal GPU of the tenant (16 + 4): 2 CPU / 8Gi, plus the
        # autoscaler sidecar an autoscaling deployment's head carries (500m / 512Mi).
        assert cpu == {
            "name": "portal-cpu",
            "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": 0},
                {"name": "cpu", "nominalQuota": 50},
                {"name": "memory", "nominalQuota": "170Gi"},
            ],
        }
        assert l4["resources"][0] == {
            "name": "nvidia.com/gpu",
            "nominalQuota": 4,
            "lendingLimit": 2,
        }

    def test_quota_admits_a_deployment_using_all_gpus_one_replica_each(self) -> None:
        # A 1-GPU quota must admit a 1-GPU deployment: worker in the GPU flavor, head in the CPU one.
        one_gpu = tenant_queue(quotas=(FlavorQuotaSpec(flavor=L4, nominal_gpus=1),))
        cpu_flavor, flavor = manifests.render_cluster_queue(one_gpu, PLATFORM)["spec"]["resourceGroups"][0]["flavors"]
        quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
        head_quota = {r["name"]: r["nominalQuota"] for r in cpu_flavor["resources"]}
        rayservice = manifests.render_rayservice(small_spec(), PLATFORM)
        cluster = rayservice["spec"]["rayClusterConfig"]
        (head,) = cluster["headGroupSpec"]["template"]["spec"]["containers"]
        worker = worker_container(rayservice)
        assert quota["nvidia.com/gpu"] >= worker["resources"]["requests"]["nvidia.com/gpu"]
        assert quota["cpu"] >= worker["resources"]["requests"]["cpu"]
        assert int(quota["memory"][:-2]) >= int(worker["resources"]["requests"]["memory"][:-2])
        assert (head["resources"]["requests"]["cpu"], head["resources"]["requests"]["memory"]) == ("2", "8Gi")
        # The head's 2 / 8Gi plus the autoscaler sidecar's 500m / 512Mi: what the real Kueue 0.19.2
        # charged an autoscaling RayService's head on KubeRay 1.6.2 (2500m / 8704Mi).
        assert (head_quota["cpu"], head_quota["memory"]) == ("2500m", "8704Mi")
        autoscaling = manifests.render_rayservice(small_spec(min_replicas=1, max_replicas=2), PLATFORM)
        sidecar = autoscaling["spec"]["rayClusterConfig"]["autoscalerOptions"]["resources"]["requests"]
        assert sidecar == {"cpu": "500m", "memory": "512Mi"}

    def test_fractional_head_sizes_give_exact_quantities(self) -> None:
        platform = replace(
            PLATFORM, head_cpu="500m", head_memory="1536Mi", autoscaler_cpu="250m", autoscaler_memory="512Mi"
        )
        three = tenant_queue(quotas=(FlavorQuotaSpec(flavor=L4, nominal_gpus=3),))
        cpu_flavor, _ = manifests.render_cluster_queue(three, platform)["spec"]["resourceGroups"][0]["flavors"]
        quota = {r["name"]: r["nominalQuota"] for r in cpu_flavor["resources"]}
        assert quota["cpu"] == "2250m"  # 3 x (500m + 250m)
        assert quota["memory"] == "6Gi"  # 3 x (1.5Gi + 0.5Gi)

    def test_the_cpu_flavor_is_named_by_the_platform_and_may_not_clash_with_a_gpu_flavor(self) -> None:
        platform = replace(PLATFORM, cpu_flavor="l4")
        with pytest.raises(ValueError, match="name of the CPU flavor"):
            manifests.render_cluster_queue(tenant_queue(), platform)
        platform = replace(PLATFORM, cpu_flavor="cpu-nodes", cpu_flavor_node_labels=(("pool", "cpu"),))
        first = manifests.render_cluster_queue(tenant_queue(), platform)["spec"]["resourceGroups"][0]["flavors"][0]
        assert first["name"] == "cpu-nodes"
        flavor = manifests.render_cpu_resource_flavor(platform)
        assert (flavor["metadata"]["name"], flavor["spec"]) == (
            "cpu-nodes",
            {"nodeLabels": {LABEL_FLAVOR: "cpu-nodes", "pool": "cpu"}},
        )
        assert_valid(flavor)

    def test_the_cpu_flavor_is_labelled_even_when_the_platform_names_no_labels(self) -> None:
        # Unlabelled, it would fit every pod under Kueue >= 0.18.2 and heads would select nothing.
        flavor = manifests.render_cpu_resource_flavor(PLATFORM)
        assert flavor["spec"] == {"nodeLabels": {LABEL_FLAVOR: "portal-cpu"}}
        assert_valid(flavor)

    def test_the_portal_label_names_the_flavor_whatever_labels_it_was_given(self) -> None:
        spoofed = replace(L4, node_labels=((LABEL_FLAVOR, "h100-sxm"), ("nvidia.com/gpu.product", "NVIDIA-L4")))
        assert manifests.render_resource_flavor(spoofed)["spec"]["nodeLabels"][LABEL_FLAVOR] == "l4"
        platform = replace(PLATFORM, cpu_flavor_node_labels=((LABEL_FLAVOR, "l4"),))
        assert manifests.render_cpu_resource_flavor(platform)["spec"]["nodeLabels"] == {LABEL_FLAVOR: "portal-cpu"}

    def test_more_cpu_node_labels_than_a_resource_flavor_holds_are_refused(self) -> None:
        labels = tuple((f"example.com/l{i}", "x") for i in range(8))
        with pytest.raises(ValueError, match="at most 7 labels"):
            manifests.render_cpu_resource_flavor(replace(PLATFORM, cpu_flavor_node_labels=labels))
        flavor = manifests.render_cpu_resource_flavor(replace(PLATFORM, cpu_flavor_node_labels=labels[:7]))
        assert len(flavor["spec"]["nodeLabels"]) == 8
        assert_valid(flavor)

    def test_cluster_queue_joins_the_cohort_and_preempts_sensibly(self) -> None:
        spec = manifests.render_cluster_queue(tenant_queue())["spec"]
        assert spec["cohortName"] == "shared-gpus"
        assert spec["preemption"] == {
            "reclaimWithinCohort": "Any",
            "withinClusterQueue": "LowerPriority",
        }
        assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "tenant-acme"}}

    def test_without_cohort_there_are_no_borrowing_or_lending_limits(self) -> None:
        # CEL rule on ClusterQueue: borrowingLimit must be nil when the cohort is empty.
        spec = manifests.render_cluster_queue(tenant_queue(cohort=""))["spec"]
        assert "cohortName" not in spec
        for flavor in spec["resourceGroups"][0]["flavors"]:
            for resource in flavor["resources"]:
                assert set(resource) == {"name", "nominalQuota"}

    def test_unlimited_borrowing_is_an_absent_limit(self) -> None:
        quota = FlavorQuotaSpec(flavor=L4, nominal_gpus=2)
        spec = manifests.render_cluster_queue(tenant_queue(quotas=(quota,)))["spec"]
        (resource, *_) = spec["resourceGroups"][0]["flavors"][1]["resources"]
        assert resource == {"name": "nvidia.com/gpu", "nominalQuota": 2}

    def test_local_queue_points_at_the_cluster_queue(self) -> None:
        queue = manifests.render_local_queue(tenant_queue())
        assert queue["kind"] == "LocalQueue"
        assert (queue["metadata"]["name"], queue["metadata"]["namespace"]) == (
            "acme-queue",
            "tenant-acme",
        )
        assert queue["spec"] == {"clusterQueue": "acme"}

    def test_cohort_object(self) -> None:
        cohort = manifests.render_cohort("shared-gpus")
        assert (cohort["kind"], cohort["metadata"]["name"]) == ("Cohort", "shared-gpus")


def test_renderers_do_not_share_mutable_state() -> None:
    first = manifests.render_rayservice(large_spec(), PLATFORM)
    snapshot = copy.deepcopy(first)
    worker_container(first)["env"].append({"name": "X", "value": "1"})
    first["metadata"]["labels"]["x"] = "y"
    assert manifests.render_rayservice(large_spec(), PLATFORM) == snapshot


@pytest.mark.parametrize(
    "source",
    [
        "pvc://models/../etc",
        "pvc://models/a/../../x",
        "pvc://models/a//b",
        "pvc://models/./a",
        "pvc://models/a\\\\..\\\\b",
        "pvc://models/%2e%2e/x",
        "pvc://models/a\x00b",
    ],
)
def test_a_pvc_path_that_leaves_its_volume_is_never_rendered(source):
    """Validation refuses these first; the renderer refuses them again (rows saved before it)."""
    from runtime.manifests.common import pvc_model_path

    with pytest.raises(RenderError, match="leaves its volume"):
        pvc_model_path(source)


def test_a_pvc_path_inside_its_volume_is_mounted_under_the_model_root():
    from runtime.manifests.common import pvc_model_path

    assert pvc_model_path("pvc://models/llama/3-8b/") == "/models/models/llama/3-8b"


def test_a_render_error_is_a_value_error_so_previews_still_catch_it() -> None:
    """The reconciler tells a spec that cannot render (RenderError: recorded, not retried) from
    any other ValueError (a bug: the task fails); a preview catching ValueError sees both."""
    with pytest.raises(ValueError, match="at most 47") as raised:
        manifests.render_rayservice(small_spec(name="a" * 48), PLATFORM)
    assert type(raised.value) is RenderError
