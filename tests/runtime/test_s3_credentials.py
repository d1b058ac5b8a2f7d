"""The tenant's S3 Secret (`llm-portal-s3`) reaches the engines of `s3://` deployments, and only them.

KubeRay: head and worker containers get each key of the Secret as an optional secretKeyRef. Ray Serve
LLM downloads an s3:// source with the AWS CLI (`aws s3 cp`: ray-project/ray python/ray/llm/_internal/
common/utils/cloud_filesystem/s3_filesystem.py), which reads the AWS_* variables. Optional, so a pod
of a tenant without credentials still starts and the CLI uses its default chain (IRSA, instance profile).

Any change to a pod template restarts the engine (a KubeRay cluster is recreated), so deployments of
every other source must render exactly what they did: the golden files are compared here too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime import manifests
from runtime.manifests.storage import S3_KEYS, S3_SECRET, render_tenant_secret, s3_credentials_env
from tests.runtime.test_manifests import PLATFORM, large_spec, small_spec, worker_container
from tests.support.crd import assert_valid

GOLDEN = Path(__file__).parent / "golden"
S3_SOURCE = "s3://models/qwen/qwen2.5-0.5b"


def head_container(rayservice: dict[str, Any]) -> dict[str, Any]:
    (container,) = rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
    return container


def s3_refs(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{variable: secretKeyRef} of the container's env entries that read the S3 Secret."""
    return {
        item["name"]: item["valueFrom"]["secretKeyRef"]
        for item in container.get("env", [])
        if item.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == S3_SECRET
    }


EXPECTED_REFS = {key: {"name": S3_SECRET, "key": key, "optional": True} for key in S3_KEYS}


class TestRendering:
    def test_only_an_s3_source_gets_the_credentials(self) -> None:
        assert s3_credentials_env(S3_SOURCE) == [
            {"name": key, "valueFrom": {"secretKeyRef": {"name": S3_SECRET, "key": key, "optional": True}}}
            for key in S3_KEYS
        ]
        for source in ("Qwen/Qwen2.5-0.5B-Instruct", "pvc://weights/qwen", "gs://bucket/qwen", "S3-like/model"):
            assert s3_credentials_env(source) == []

    def test_every_key_the_portal_writes_is_handed_over(self) -> None:
        # The Secret the portal writes and the env that reads it name the same keys.
        secret = render_tenant_secret(
            name=S3_SECRET, namespace="tenant-acme", tenant_slug="acme", values=dict.fromkeys(S3_KEYS, "x")
        )
        assert [item["valueFrom"]["secretKeyRef"]["key"] for item in s3_credentials_env(S3_SOURCE)] == list(
            secret["stringData"]
        )

    def test_kuberay_head_and_workers_read_the_secret_and_no_value_is_in_the_manifest(self) -> None:
        rayservice = manifests.render_rayservice(small_spec(model_source=S3_SOURCE), PLATFORM)
        for container in (head_container(rayservice), worker_container(rayservice)):
            assert s3_refs(container) == EXPECTED_REFS
            assert not any("value" in item for item in container["env"] if item["name"] in S3_KEYS)

    def test_the_hf_token_and_the_worker_settings_stay_beside_them(self) -> None:
        rayservice = manifests.render_rayservice(small_spec(model_source=S3_SOURCE, hf_token_secret="tok"), PLATFORM)
        assert [item["name"] for item in head_container(rayservice)["env"]] == ["HF_TOKEN", *S3_KEYS]
        worker_env = [item["name"] for item in worker_container(rayservice)["env"]]
        assert worker_env == ["HF_HOME", "HF_TOKEN", "NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL", "NCCL_DEBUG", *S3_KEYS]

    @pytest.mark.parametrize("source", ["Qwen/Qwen2.5-0.5B-Instruct", "pvc://weights/meta/llama"])
    def test_other_sources_render_no_s3_env(self, source: str) -> None:
        for spec in (small_spec(model_source=source), large_spec(model_source=source)):
            rayservice = manifests.render_rayservice(spec, PLATFORM)
            assert s3_refs(head_container(rayservice)) == {}
            assert s3_refs(worker_container(rayservice)) == {}

    def test_head_without_token_or_s3_has_no_env_key_at_all(self) -> None:
        # An empty `env: []` would still be a pod-template change for KubeRay's hash.
        assert "env" not in head_container(manifests.render_rayservice(small_spec(), PLATFORM))

    @pytest.mark.parametrize(
        ("case", "spec"),
        [("rayservice_small", small_spec()), ("rayservice_large", large_spec())],
    )
    def test_non_s3_golden_manifests_are_unchanged(self, case: str, spec: Any) -> None:
        assert manifests.render_rayservice(spec, PLATFORM) == yaml.safe_load((GOLDEN / f"{case}.yaml").read_text())


class TestCrdSchema:
    @pytest.mark.parametrize("hf_token_secret", [None, "tok"])
    def test_s3_rayservice_validates_against_the_kuberay_crd(self, hf_token_secret: str | None) -> None:
        spec = small_spec(model_source=S3_SOURCE, hf_token_secret=hf_token_secret)
        assert_valid(manifests.render_rayservice(spec, PLATFORM))
        assert_valid(manifests.render_rayservice(spec, replace(PLATFORM, model_cache_pvc=None)))

    def test_the_validator_sees_the_secret_key_ref_fields(self) -> None:
        # A misspelt `optional` would be pruned by the API server and the pod then refused without
        # the Secret: the schema check must catch it, or the test above proves nothing.
        rayservice = manifests.render_rayservice(small_spec(model_source=S3_SOURCE), PLATFORM)
        ref = worker_container(rayservice)["env"][-1]["valueFrom"]["secretKeyRef"]
        ref["optionl"] = ref.pop("optional")
        with pytest.raises(Exception, match="optionl"):
            assert_valid(rayservice)
