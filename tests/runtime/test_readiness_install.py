"""Readiness of the install (runtime/readiness_install.py and the API checks of runtime/readiness.py)
on the Kubernetes API test server: the API server's and the controllers' versions against
runtime.versions, whether Kueue runs (its webhook answering a dry-run create), GPU quota against
node capacity, the CPU flavor's labels, Kueue's RayService integration when its ConfigMap is not
where the portal looks, and which version of the visibility API is read."""

from __future__ import annotations

from typing import Any

import pytest

from runtime import k8s
from runtime.k8s.kinds import CRD, DEPLOYMENT
from runtime.readiness import check_apis, check_kueue_integrations, readiness
from runtime.readiness_base import ReadinessConfig
from runtime.readiness_install import (
    check_backend_versions,
    check_kueue_controller,
    check_quota_capacity,
    check_server_version,
)
from runtime.spec import FlavorSpec
from tests.support.k8s import K8sApiServer
from tests.support.k8s.readiness import (
    CPU_LABELS,
    H100_LABELS,
    cluster_queue,
    controller,
    crd,
    flavor,
    kueue_webhooks,
    node,
)

H100 = FlavorSpec("h100-sxm5", "H100 SXM5", "H100", 80, 8, node_labels=tuple(sorted(H100_LABELS.items())))
CONFIG = ReadinessConfig(backends=("kuberay",), flavors=(H100,), namespaces=("alpha",))


@pytest.fixture
def api(k8s_api: K8sApiServer) -> K8sApiServer:
    """Kueue 0.19.2 running with its webhooks, KubeRay's CRD labelled 1.6.2, one H100 node (8 GPUs),
    a CPU node, and two ClusterQueues whose H100 quota (4 + 4) the node holds."""
    k8s_api.put(DEPLOYMENT, controller("registry.k8s.io/kueue/kueue:v0.19.2"))
    kueue_webhooks(k8s_api)
    k8s_api.put(CRD, crd("rayservices.ray.io", "1.6.2"))
    k8s_api.put(k8s.NODE, node("p5-0", H100_LABELS, 8))
    k8s_api.put(k8s.NODE, node("cpu-0", CPU_LABELS, 0))
    k8s_api.put(k8s.RESOURCEFLAVOR, flavor("portal-cpu", CPU_LABELS))
    k8s_api.put(k8s.RESOURCEFLAVOR, flavor("h100-sxm5", H100_LABELS))
    k8s_api.put(k8s.CLUSTERQUEUE, cluster_queue("alpha", {"h100-sxm5": 4}))
    k8s_api.put(k8s.CLUSTERQUEUE, cluster_queue("beta", {"h100-sxm5": 4}))
    return k8s_api


def one(checks: list) -> dict[str, Any]:
    assert len(checks) == 1, checks
    c = checks[0]
    return {"key": c.key, "status": c.status, "detail": c.detail, "fix": c.fix}


class TestServerVersion:
    @pytest.mark.parametrize(
        ("version", "status", "said"),
        [
            ("v1.36.2", "green", "Kubernetes 1.36.2 (tested on 1.36.2)."),
            ("v1.35.4-eks-1234", "green", "Kubernetes 1.35.4 (tested on 1.36.2)."),
            ("v1.33.1", "red", "Kubernetes 1.33.1 is older than 1.34.0"),
            ("v1.37.0", "amber", "Kubernetes 1.37.0 is newer than 1.36"),
        ],
    )
    def test_the_api_server_version_is_judged_by_the_matrix(self, api, version, status, said):
        api.call(lambda: setattr(api.emulator, "server_version", version))
        check = one(check_server_version(api.cluster(), CONFIG))
        assert (check["key"], check["status"]) == ("version:kubernetes", status)
        assert check["detail"].startswith(said)


class TestKueueController:
    def test_running_at_the_tested_version_is_green(self, api):
        check = one(check_kueue_controller(api.cluster(), CONFIG))
        assert check["status"] == "green"
        assert check["detail"] == (
            "Kueue 0.19.2 (tested on 0.19.2). Its webhook answers. "
            "Deployment kueue-system/kueue-controller-manager: 1 of 1 replica(s) available."
        )

    def test_its_probe_stores_nothing(self, api):
        check_kueue_controller(api.cluster(), CONFIG)
        assert api.list_objects(k8s.RESOURCEFLAVOR) and all(
            not f["metadata"]["name"].startswith("llm-portal-readiness") for f in api.list_objects(k8s.RESOURCEFLAVOR)
        )
        assert ("POST", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors") in api.proxied_requests()

    def test_a_kueue_that_is_down_is_red(self, api):
        kueue_webhooks(api, running=False)
        api.patch_object(DEPLOYMENT, "kueue-controller-manager", "kueue-system", {"status": {"availableReplicas": 0}})
        check = one(check_kueue_controller(api.cluster(), CONFIG))
        assert check["status"] == "red"
        assert "Its webhook does not answer" in check["detail"] and "failed calling webhook" in check["detail"]
        assert "0 of 1 replica(s) available" in check["detail"]
        assert "Start Kueue" in check["fix"]

    def test_webhooks_not_configured_is_red(self, api):
        api.call(lambda: api.emulator.admission.clear())  # no MutatingWebhookConfiguration
        check = one(check_kueue_controller(api.cluster(), CONFIG))
        assert check["status"] == "red" and "webhooks are not configured" in check["detail"]

    def test_without_its_deployment_the_webhook_proves_it_runs_but_the_version_is_unknown(self, api):
        api.delete_object(DEPLOYMENT, "kueue-controller-manager", "kueue-system")
        check = one(check_kueue_controller(api.cluster(), CONFIG))
        assert check["status"] == "amber"
        assert check["detail"] == (
            "Kueue version unknown (tested on 0.19.2). Its webhook answers. "
            "No Deployment kueue-system/kueue-controller-manager to read its version from."
        )

    def test_an_unreadable_deployment_is_amber(self, api):
        api.inject_faults(1.0, (403,), when=lambda method, path: "/deployments/" in path)
        check = one(check_kueue_controller(api.cluster(), CONFIG))
        assert check["status"] == "amber" and "Cannot read Deployment" in check["detail"]

    @pytest.mark.parametrize(
        ("image", "status"), [("registry.k8s.io/kueue/kueue:v0.15.2", "red"), ("kueue:v0.20.1@sha256:abc", "amber")]
    )
    def test_its_image_tag_is_its_version(self, api, image, status):
        api.put(DEPLOYMENT, controller(image))
        assert one(check_kueue_controller(api.cluster(), CONFIG))["status"] == status


class TestBackendVersions:
    @pytest.mark.parametrize(
        ("version", "status", "said"),
        [
            ("1.6.2", "green", "KubeRay 1.6.2 (tested on 1.6.2)."),
            ("1.7.0", "amber", "copies `suspend` to the RayCluster only at creation"),
            ("1.5.0", "red", "older than 1.6.0"),
            (None, "amber", "KubeRay version unknown"),
        ],
    )
    def test_kuberay_version_from_its_crd(self, api, version, status, said):
        api.put(CRD, crd("rayservices.ray.io", version))
        check = one(check_backend_versions(api.cluster(), CONFIG))
        assert (check["key"], check["status"]) == ("controller:kuberay", status)
        assert check["detail"].startswith("CRD rayservices.ray.io present.") and said in check["detail"]
        if version is None:
            assert "app.kubernetes.io/version" in check["fix"]

    def test_a_backend_not_enabled_or_not_installed_gets_no_version_check(self, api):
        assert check_backend_versions(api.cluster(), ReadinessConfig(backends=())) == []
        api.undeclare(k8s.RAYSERVICE)  # KubeRay absent: none of its kinds is served
        api.undeclare(k8s.RAYCLUSTER)
        assert check_backend_versions(api.cluster(), CONFIG) == []


class TestApis:
    def test_an_optional_backend_not_installed_is_amber(self, api):
        api.undeclare(k8s.INFERENCESERVICE)
        checks = {c.key: c for c in check_apis(api.cluster(), ReadinessConfig(backends=("kuberay", "kserve")))}
        assert checks["api:serving.kserve.io"].status == "amber"
        assert checks["api:ray.io"].status == "green"

    @pytest.mark.parametrize(
        ("served", "status", "title"),
        [
            (("v1beta2",), "green", "Kueue visibility API (visibility.kueue.x-k8s.io/v1beta2)"),
            (("v1beta1",), "green", "Kueue visibility API (visibility.kueue.x-k8s.io/v1beta1)"),
            (("v1beta1", "v1beta2"), "green", "Kueue visibility API (visibility.kueue.x-k8s.io/v1beta2)"),
            ((), "amber", "Kueue visibility API (visibility.kueue.x-k8s.io/v1beta2)"),
        ],
    )
    def test_the_visibility_api_is_v1beta2_first_then_v1beta1(self, api, served, status, title):
        for version in served:
            api.declare(f"visibility.kueue.x-k8s.io/{version}/clusterqueues", "ClusterQueue", namespaced=False)
        checks = {c.key: c for c in check_apis(api.cluster(), CONFIG)}
        visibility = checks["api:visibility.kueue.x-k8s.io"]
        assert (visibility.status, visibility.title) == (status, title)
        assert not any("API API" in c.title for c in checks.values())


class TestVisibilityReads:
    @pytest.mark.parametrize(("served", "path"), [(("v1beta1", "v1beta2"), "v1beta2"), (("v1beta1",), "v1beta1")])
    def test_queue_positions_are_read_at_the_version_served(self, api, served, path):
        for version in served:
            api.declare(f"visibility.kueue.x-k8s.io/{version}/clusterqueues", "ClusterQueue", namespaced=False)
        cluster = api.cluster()
        assert cluster.pending_workloads("alpha") == []
        cluster.pending_workloads("beta")
        reads = [p for m, p in api.proxied_requests() if p.endswith("/pendingworkloads")]
        assert reads == [
            f"/apis/visibility.kueue.x-k8s.io/{path}/clusterqueues/{q}/pendingworkloads" for q in ("alpha", "beta")
        ]
        assert cluster.calls["discovery"] == 1  # the version is remembered


class TestQuotaCapacity:
    def test_quota_the_nodes_hold_is_green_with_the_numbers(self, api):
        checks = {c.key: c for c in check_quota_capacity(api.cluster(), CONFIG)}
        assert checks["quota:h100-sxm5"].status == "green"
        assert (
            checks["quota:h100-sxm5"].detail
            == "8 nominal nvidia.com/gpu (alpha 4, beta 4); 8 allocatable on 1 node(s)."
        )
        assert checks["cpuflavor:portal-cpu"].status == "green"

    def test_more_quota_than_gpus_is_amber_with_the_numbers(self, api):
        api.put(k8s.CLUSTERQUEUE, cluster_queue("alpha", {"h100-sxm5": 8}))
        api.put(k8s.CLUSTERQUEUE, cluster_queue("beta", {"h100-sxm5": 16}))
        check = {c.key: c for c in check_quota_capacity(api.cluster(), CONFIG)}["quota:h100-sxm5"]
        assert check.status == "amber"
        assert check.detail == (
            "24 nominal nvidia.com/gpu (alpha 8, beta 16); 8 allocatable on 1 node(s). 16 GPU(s) have no node."
        )
        assert "Add nodes, or lower the flavor's quotas" in check.fix

    def test_a_karpenter_pool_may_have_more_quota_than_nodes(self, api):
        api.put(k8s.CLUSTERQUEUE, cluster_queue("beta", {"h100-sxm5": 16}))
        config = ReadinessConfig(backends=("kuberay",), pools=("h100-sxm5",))
        assert {c.key: c for c in check_quota_capacity(api.cluster(), config)}["quota:h100-sxm5"].status == "green"

    def test_a_cpu_flavor_without_node_labels_is_amber(self, api):
        api.put(k8s.RESOURCEFLAVOR, flavor("portal-cpu", {}))
        check = {c.key: c for c in check_quota_capacity(api.cluster(), CONFIG)}["cpuflavor:portal-cpu"]
        assert check.status == "amber" and check.detail.endswith("Ray heads may land on GPU nodes.")
        assert "KUEUE_CPU_NODE_LABELS" in check.fix

    def test_a_flavor_the_queues_name_but_that_does_not_exist_is_red(self, api):
        api.delete_object(k8s.RESOURCEFLAVOR, "h100-sxm5")
        check = {c.key: c for c in check_quota_capacity(api.cluster(), CONFIG)}["quota:h100-sxm5"]
        assert check.status == "red" and "which does not exist" in check.detail


class TestKueueIntegrationWithoutItsConfigMap:
    """The ConfigMap kueue-system/kueue-manager-config is absent (a Helm install names it
    otherwise): the portal asks Kueue's RayService webhook with a dry-run RayService instead."""

    def test_an_enabled_integration_is_confirmed_another_way(self, api):
        check = one(check_kueue_integrations(api.cluster(), CONFIG))
        assert check["status"] == "green"
        assert check["detail"] == (
            "Kueue's configuration kueue-system/kueue-manager-config was not found: its integrations could not "
            "be read. Confirmed another way: Kueue's webhook suspended a dry-run RayService with a queue name."
        )
        assert api.list_objects(k8s.RAYSERVICE) == []  # dry run: nothing stored

    def test_a_disabled_integration_is_red(self, api):
        kueue_webhooks(api, rayservice=False)  # Kueue's no-op webhook for a disabled framework
        check = one(check_kueue_integrations(api.cluster(), CONFIG))
        assert check["status"] == "red" and "unsuspended" in check["detail"]
        assert "ray.io/rayservice" in check["fix"]

    def test_when_the_webhook_cannot_tell_either_it_is_amber_not_red(self, api):
        kueue_webhooks(api, running=False)
        check = one(check_kueue_integrations(api.cluster(), CONFIG))
        assert check["status"] == "amber" and "could not confirm it either" in check["detail"]
        assert "KUEUE_CONFIG_MAP" in check["fix"]


def test_a_dry_run_create_stores_nothing_and_runs_admission(api):
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "x"}, "spec": {}}
    answer = api.cluster().dry_run_create(k8s.RESOURCEFLAVOR, body)
    assert answer["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    assert api.get_object(k8s.RESOURCEFLAVOR, "x") is None


def test_all_install_checks_run_in_page_order(api):
    keys = [c["key"] for c in readiness(api.cluster(), CONFIG)]
    assert keys.index("api:ray.io") < keys.index("version:kubernetes") < keys.index("controller:kueue")
    assert keys.index("controller:kuberay") < keys.index("quota:h100-sxm5")
