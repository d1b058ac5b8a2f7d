"""runtime.readiness.knative against the test API server: KServe's annotation list (both modes)
and, in Knative mode, Knative Serving, its feature flags and its queue-proxy requests."""

from __future__ import annotations

import json

import pytest

from runtime import k8s
from runtime.manifests.kserve import PORTAL_ANNOTATIONS
from runtime.readiness.knative import (
    check_annotation_propagation,
    check_features,
    check_knative,
    check_queue_proxy,
)
from runtime.readiness_base import AMBER, GREEN, RED, ReadinessConfig
from tests.support.k8s import K8sApiServer

STANDARD = ReadinessConfig(backends=("kuberay", "kserve"))
KNATIVE = ReadinessConfig(backends=("kserve",), kserve_mode="Knative", model_cache_pvc="model-cache")


def config_map(namespace: str, name: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


def kserve_config(listed: list[str]) -> dict:
    body = {"resource": {"cpuRequest": "1"}, "serviceAnnotationDisallowedList": listed}
    return config_map("kserve", "inferenceservice-config", {"inferenceService": json.dumps(body)})


class TestAnnotations:
    def test_listed_is_green(self, k8s_api: K8sApiServer) -> None:
        k8s_api.put(k8s.CONFIGMAP, kserve_config(["my.custom/1", *PORTAL_ANNOTATIONS]))
        assert check_annotation_propagation(k8s_api.cluster()).status == GREEN

    def test_missing_is_amber_and_names_them_and_the_fix(self, k8s_api: K8sApiServer) -> None:
        k8s_api.put(k8s.CONFIGMAP, kserve_config(["llm-portal.io/generation"]))
        check = check_annotation_propagation(k8s_api.cluster())
        assert check.status == AMBER
        assert "llm-portal.io/spec-hash, llm-portal.io/exposure not in kserve/inferenceservice-config" in check.detail
        assert "serviceAnnotationDisallowedList" in check.fix

    def test_absent_config_is_amber(self, k8s_api: K8sApiServer) -> None:
        check = check_annotation_propagation(k8s_api.cluster())
        assert (check.status, check.detail) == (
            AMBER,
            "KServe's ConfigMap kserve/inferenceservice-config was not found.",
        )


class TestModes:
    def test_nothing_without_the_kserve_backend(self, k8s_api: K8sApiServer) -> None:
        assert check_knative(k8s_api.cluster(), ReadinessConfig(backends=("kuberay",))) == []

    def test_standard_mode_needs_no_knative(self, k8s_api: K8sApiServer) -> None:
        k8s_api.put(k8s.CONFIGMAP, kserve_config(list(PORTAL_ANNOTATIONS)))
        assert [(c.key, c.status) for c in check_knative(k8s_api.cluster(), STANDARD)] == [
            ("kserve:annotations", GREEN)
        ]

    def test_knative_mode_without_knative_serving_is_red(self, k8s_api: K8sApiServer) -> None:
        k8s_api.put(k8s.CONFIGMAP, kserve_config(list(PORTAL_ANNOTATIONS)))
        checks = {c.key: c for c in check_knative(k8s_api.cluster(), KNATIVE)}
        assert checks["knative:api"].status == RED
        assert "KSERVE_DEPLOYMENT_MODE=Standard" in checks["knative:api"].fix


class TestFeatures:
    FLAGS = {
        "kubernetes.podspec-nodeselector": "enabled",
        "kubernetes.podspec-tolerations": "enabled",
        "kubernetes.podspec-persistent-volume-claim": "enabled",
        "kubernetes.podspec-persistent-volume-write": "enabled",
    }

    def test_every_flag_enabled_is_green(self, k8s_api: K8sApiServer) -> None:
        k8s_api.put(k8s.CONFIGMAP, config_map("knative-serving", "config-features", self.FLAGS))
        assert check_features(k8s_api.cluster(), KNATIVE).status == GREEN

    @pytest.mark.parametrize("off", sorted(FLAGS))
    def test_a_flag_off_is_red_with_the_patch(self, k8s_api: K8sApiServer, off: str) -> None:
        k8s_api.put(k8s.CONFIGMAP, config_map("knative-serving", "config-features", {**self.FLAGS, off: "disabled"}))
        check = check_features(k8s_api.cluster(), KNATIVE)
        assert check.status == RED and off in check.detail and f'"{off}": "enabled"' in check.fix

    def test_without_a_model_cache_the_volume_flags_are_not_needed(self, k8s_api: K8sApiServer) -> None:
        flags = {k: v for k, v in self.FLAGS.items() if "volume" not in k}
        k8s_api.put(k8s.CONFIGMAP, config_map("knative-serving", "config-features", flags))
        no_cache = ReadinessConfig(backends=("kserve",), kserve_mode="Knative")
        assert check_features(k8s_api.cluster(), no_cache).status == GREEN

    def test_knatives_defaults_are_off(self, k8s_api: K8sApiServer) -> None:
        check = check_features(k8s_api.cluster(), KNATIVE)
        assert check.status == RED and "kubernetes.podspec-nodeselector" in check.detail


class TestQueueProxy:
    @pytest.mark.parametrize("data", [{}, {"queue-sidecar-cpu-request": "25m"}, {"queue-sidecar-cpu-request": "0.025"}])
    def test_knatives_defaults_are_what_the_quota_sizes_for(self, k8s_api: K8sApiServer, data) -> None:
        k8s_api.put(k8s.CONFIGMAP, config_map("knative-serving", "config-deployment", data))
        assert check_queue_proxy(k8s_api.cluster()).status == GREEN

    def test_other_requests_are_amber(self, k8s_api: K8sApiServer) -> None:
        data = {"queue-sidecar-cpu-request": "100m", "queue-sidecar-memory-request": "50Mi"}
        k8s_api.put(k8s.CONFIGMAP, config_map("knative-serving", "config-deployment", data))
        check = check_queue_proxy(k8s_api.cluster())
        assert check.status == AMBER
        assert "queue-sidecar-cpu-request 100m, queue-sidecar-memory-request 50Mi" in check.detail
