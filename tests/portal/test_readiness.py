"""Cluster readiness (runtime.readiness, portal/readiness.py) against the Kubernetes API test
server: a cluster set up as the portal needs is all green; each broken setup turns exactly its
check red (or amber) and says how to fix it. The page and the API are for platform admins."""

from __future__ import annotations

import pytest

from portal.readiness import cluster_readiness
from quotas.models import GpuFlavor
from runtime import k8s
from runtime.k8s.kinds import TOPOLOGY
from tests.support.http_stubs import base_url, serve
from tests.support.k8s.emulator import object_key
from tests.support.k8s.readiness import node, set_up_for_the_portal


@pytest.fixture
def prometheus():
    server = serve(lambda method, path, body: (200, "text/plain", b"Prometheus is Ready.\n"))
    yield base_url(server)
    server.shutdown()


@pytest.fixture
def healthy(world, cluster_api, settings, prometheus):
    """Everything the portal needs, present."""
    set_up_for_the_portal(cluster_api, world, settings, prometheus)
    return cluster_api


def by_key() -> dict[str, dict]:
    return {c["key"]: c for c in cluster_readiness()["checks"]}


def not_green(checks: dict[str, dict]) -> dict[str, str]:
    return {key: c["status"] for key, c in checks.items() if c["status"] != "green"}


def test_a_cluster_set_up_for_the_portal_is_all_green(healthy):
    checks = by_key()
    assert not_green(checks) == {}
    assert set(checks) == {
        "api:ray.io",
        "api:kueue.x-k8s.io",
        "api:visibility.kueue.x-k8s.io",
        "api:serving.kserve.io",
        "kueue:rayservice",
        "kueue:kserve",
        "kserve:annotations",
        "flavor:a100-pcie",
        "flavor:h100-sxm5",
        "pvc:model-cache",
        "rbac:portal",
        "prometheus",
        "kueue:queueing",
        "version:kubernetes",
        "controller:kueue",
        "controller:kuberay",
        "controller:kserve",
        "quota:a100-pcie",
        "quota:h100-sxm5",
        "cpuflavor:portal-cpu",
    }
    assert cluster_readiness()["summary"] == "green"


def test_an_enabled_backend_not_installed_is_amber_while_another_is(healthy):
    healthy.undeclare(k8s.RAYSERVICE)  # KubeRay absent: none of its kinds is served
    healthy.undeclare(k8s.RAYCLUSTER)
    checks = by_key()
    assert not_green(checks) == {"api:ray.io": "amber"}
    assert "KubeRay is not installed" in checks["api:ray.io"]["detail"]
    assert "KubeRay" in checks["api:ray.io"]["fix"] and "RUNTIME_BACKENDS" in checks["api:ray.io"]["fix"]
    assert cluster_readiness()["summary"] == "amber"


def test_no_enabled_backend_installed_is_red(healthy):
    healthy.undeclare(k8s.RAYSERVICE)
    healthy.undeclare(k8s.RAYCLUSTER)
    healthy.undeclare(k8s.INFERENCESERVICE)
    checks = by_key()
    assert not_green(checks) == {"api:ray.io": "red", "api:serving.kserve.io": "red"}
    assert cluster_readiness()["summary"] == "red"


def test_a_wrong_version(healthy):
    # An older Kueue stores nothing at v1beta2 (kmock serves the version of any stored object).
    for kind, names in (
        (k8s.CLUSTERQUEUE, ("alpha", "beta")),
        (k8s.RESOURCEFLAVOR, ("portal-cpu", "h100-sxm5", "a100-pcie")),
    ):
        for name in names:
            key = object_key(kind, None, name)
            healthy.call(lambda key=key: healthy.emulator.objects.__delitem__(key))
    kueue_kinds = (k8s.WORKLOAD, k8s.CLUSTERQUEUE, k8s.LOCALQUEUE, k8s.RESOURCEFLAVOR, k8s.COHORT, TOPOLOGY)
    for kind in (*kueue_kinds, k8s.WORKLOADPRIORITYCLASS):
        healthy.undeclare(kind)
        healthy.declare(f"kueue.x-k8s.io/v1beta1/{kind.plural}", kind.kind, namespaced=kind.namespaced)
    check = by_key()["api:kueue.x-k8s.io"]
    assert check["status"] == "red"
    assert check["detail"] == "kueue.x-k8s.io serves v1beta1; the portal uses v1beta2."
    assert "v0.16" in check["fix"]


def test_no_nodes_for_a_flavor_yet_is_amber(healthy):
    healthy.delete_object(k8s.NODE, "p5-0")
    checks = by_key()
    assert not_green(checks) == {"flavor:h100-sxm5": "amber", "quota:h100-sxm5": "amber"}
    assert "No node carries node.kubernetes.io/instance-type=p5.48xlarge yet" in checks["flavor:h100-sxm5"]["detail"]
    assert checks["flavor:h100-sxm5"]["fix"]
    assert cluster_readiness()["summary"] == "amber"


def test_nodes_without_gpus_or_with_an_untolerated_taint(healthy, world):
    healthy.put(k8s.NODE, node("a100-0", {"gpu.example.com/model": "a100"}, 0))
    world.h100.tolerations = []
    world.h100.save()
    checks = by_key()
    # The A100 node has no GPUs now: its quota has no node either.
    assert not_green(checks) == {"flavor:a100-pcie": "red", "flavor:h100-sxm5": "red", "quota:a100-pcie": "amber"}
    assert "device plugin" in checks["flavor:a100-pcie"]["fix"]
    assert "nvidia.com/gpu=present:NoSchedule" in checks["flavor:h100-sxm5"]["detail"]
    assert "toleration" in checks["flavor:h100-sxm5"]["fix"]


def test_a_flavor_whose_accelerator_type_ray_does_not_know_is_red(healthy, world):
    # Saved before the portal checked it (quotas.flavors refuses it now): Ray Serve LLM 2.60.0
    # refuses the name when it builds the app (runtime.accelerators).
    GpuFlavor.objects.filter(pk=world.h100.pk).update(accelerator_type="h100")
    checks = by_key()
    assert not_green(checks) == {"accelerator:h100-sxm5": "red"}
    assert checks["accelerator:h100-sxm5"]["detail"] == (
        "'h100' is not one of Ray's accelerator types (Ray matches case exactly); did you mean H100? "
        "Ray Serve refuses it: deployments on this flavor fail to start."
    )
    assert "accelerator type" in checks["accelerator:h100-sxm5"]["fix"]


def test_a_missing_permission(healthy):
    healthy.deny("get", "", "pods/log")
    healthy.deny("create", "ray.io", "rayservices")
    checks = by_key()
    assert not_green(checks) == {"rbac:portal": "red"}
    assert checks["rbac:portal"]["detail"] == "Missing: create rayservices (ray.io); get pods/log."


def test_without_the_optional_readiness_grant_those_checks_cannot_tell(healthy):
    # The model-cache claims are read under the portal's own grant (it creates them): not among these.
    for verb, resource in (("list", "nodes"), ("get", "configmaps")):
        healthy.deny(verb, "", resource)
    reads = ("/api/v1/nodes", "/configmaps/")
    healthy.inject_faults(1.0, (403,), when=lambda method, path: any(r in path for r in reads))
    checks = by_key()
    assert not_green(checks) == {
        "flavors": "amber",
        "kueue:kserve": "amber",  # no webhook probe for pods: it cannot tell without the ConfigMap
        "kserve:annotations": "amber",  # KServe's ConfigMap cannot be read either
        "quota": "amber",
        "rbac:readiness": "amber",
    }
    assert all("rbac.readiness.enabled=true" in checks[k]["fix"] for k in not_green(checks))
    # Kueue's ConfigMap cannot be read, but its webhook answers for it (a dry-run RayService comes
    # back suspended): seen on the real plane, whose portal ServiceAccount has no optional grant.
    rayservice = checks["kueue:rayservice"]
    assert rayservice["detail"].startswith("Cannot read kueue-system/kueue-manager-config")
    assert "Confirmed another way" in rayservice["detail"]
    assert cluster_readiness()["summary"] == "amber"


def test_kueue_without_the_rayservice_integration(healthy):
    healthy.patch_object(
        k8s.CONFIGMAP,
        "kueue-manager-config",
        "kueue-system",
        {"data": {"controller_manager_config.yaml": "integrations:\n  frameworks: [batch/job]\n"}},
    )
    check = by_key()["kueue:rayservice"]
    assert check["status"] == "red" and "batch/job" in check["detail"] and "ray.io/rayservice" in check["fix"]


def test_an_unbound_or_missing_model_cache(healthy):
    healthy.patch_object(k8s.PVC, "model-cache", "alpha", {"status": {"phase": "Pending"}})
    assert by_key()["pvc:model-cache"]["status"] == "amber"
    healthy.delete_object(k8s.PVC, "model-cache", "beta")
    check = by_key()["pvc:model-cache"]
    assert check["status"] == "red"
    assert check["detail"] == "Missing in beta: engine pods there mount it and would stay Pending."
    assert "MODEL_CACHE_PVC empty" in check["fix"]


def test_prometheus_down(healthy, settings):
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # discard port: refused
    checks = by_key()
    assert not_green(checks) == {"prometheus": "red"}


def test_the_visibility_api_missing_is_amber(world, cluster_api):
    checks = by_key()
    assert checks["api:visibility.kueue.x-k8s.io"]["status"] == "amber"


def test_no_cluster_configured_is_one_red_check(world, settings):
    settings.KUBERNETES_URL = None
    settings.KUBECONFIG = None
    checks = by_key()
    assert checks["cluster:apis"]["status"] == "red" and "KUBERNETES_URL" in checks["cluster:apis"]["fix"]


def test_the_page_shows_each_check_with_its_fix_to_platform_admins_only(world, healthy):
    healthy.undeclare(k8s.RAYSERVICE)
    healthy.undeclare(k8s.INFERENCESERVICE)
    page = world.browser("platform_admin").get("/cluster/readiness/")
    html = page.content.decode()
    assert page.status_code == 200
    assert 'data-check="api:ray.io" data-status="red"' in html and "install the KubeRay operator" in html
    for role in ("viewer", "member", "tenant_admin"):
        assert world.browser(role).get("/cluster/readiness/").status_code == 403
    body = world.client("platform_admin").get("/api/v1/cluster/readiness/").json()
    assert body["summary"] == "red"


def test_the_page_and_the_api_show_the_same_install_checks(world, healthy):
    """One source: the page's rows are the API's checks, new install checks included (here GPU
    quota over the nodes' GPUs and KubeRay 1.7), with their numbers."""
    from runtime.k8s.kinds import CRD
    from tests.support.k8s.readiness import cluster_queue, crd

    healthy.put(k8s.CLUSTERQUEUE, cluster_queue("beta", {"h100-sxm5": 16}))
    healthy.put(CRD, crd("rayservices.ray.io", "1.7.0"))
    body = world.client("platform_admin").get("/api/v1/cluster/readiness/").json()
    html = world.browser("platform_admin").get("/cluster/readiness/").content.decode()
    assert body["summary"] == "amber"
    assert not_green({c["key"]: c for c in body["checks"]}) == {
        "quota:h100-sxm5": "amber",
        "controller:kuberay": "amber",
    }
    for check in body["checks"]:
        assert f'data-check="{check["key"]}" data-status="{check["status"]}"' in html
    assert "20 nominal nvidia.com/gpu (alpha 4, beta 16); 8 allocatable on 1 node(s)." in html
    assert "copies `suspend` to the RayCluster only at creation" in html
