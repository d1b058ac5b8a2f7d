"""The readiness page against the real API server and controllers, and what it and a deployment do
while Kueue is down and after it restarts (issues 38 and 41).

On the real plane Kueue runs as a process, not as the Deployment an install makes, so its version
cannot be read there: the page says so (amber) instead of guessing, and proves it runs by its
webhook answering a dry-run ResourceFlavor (runtime/readiness_install.py). KServe is not installed
on this plane: an optional backend that is absent is amber, not red.
"""

from __future__ import annotations

import pytest

from deployments.choices import State
from deployments.reconcile import reconcile
from portal.readiness import cluster_readiness
from runtime import k8s
from runtime.readiness_install import nominal_gpus
from runtime.versions import VERSIONS
from tests.cluster.chain import condition, converge, onboard, request_and_approve, workload_of
from tests.support import chart
from tests.support.controlplane.identity import grant


def checks() -> dict[str, dict]:
    return {c["key"]: c for c in cluster_readiness()["checks"]}


def test_the_readiness_page_reads_the_real_install(world, kube, settings):
    settings.RUNTIME_BACKENDS = ["kuberay", "kserve"]
    onboard(kube, world.h100, world.a100)
    found = checks()
    status = {key: c["status"] for key, c in found.items()}

    assert status["version:kubernetes"] == "green", found["version:kubernetes"]
    assert status["api:ray.io"] == "green" and status["api:kueue.x-k8s.io"] == "green"
    # Kueue 0.19 serves its visibility API at v1beta2; the harness registers it as an install does.
    assert status["api:visibility.kueue.x-k8s.io"] == "green", found["api:visibility.kueue.x-k8s.io"]
    assert status["api:serving.kserve.io"] == "amber", found["api:serving.kserve.io"]  # optional, absent
    assert "controller:kserve" not in status  # no version check for a backend that is not there
    # The webhook answers; no Deployment to read a version from on this plane.
    kueue = found["controller:kueue"]
    assert kueue["status"] == "amber", kueue
    assert kueue["detail"].startswith("Kueue version unknown") and "Its webhook answers." in kueue["detail"], kueue
    # No kueue-manager-config ConfigMap here: the integration is confirmed by a dry-run RayService.
    assert status["kueue:rayservice"] == "green", found["kueue:rayservice"]
    assert "Confirmed another way" in found["kueue:rayservice"]["detail"]
    # Without the optional grant (the chart's rbac.readiness.enabled) nodes cannot be listed: it says so.
    assert status["quota"] == "amber" and "rbac.readiness.enabled" in found["quota"]["fix"], found["quota"]
    assert status["rbac:portal"] == "green", found["rbac:portal"]  # the ServiceAccount's grant suffices
    assert VERSIONS["kubernetes"].tested in found["version:kubernetes"]["detail"]


def test_with_the_optional_grant_quota_is_weighed_against_the_nodes_of_each_flavor(world, kube, settings):
    """The real authorizer proves the chart's optional readiness grant (rbac.readiness.enabled) is
    enough for these checks."""
    settings.RUNTIME_BACKENDS = ["kuberay"]
    onboard(kube, world.h100, world.a100)
    created = grant(kube.plane, chart.readiness_rbac())
    try:
        found = checks()
    finally:
        for path in created:
            kube.plane.request("DELETE", path)
    status = {key: c["status"] for key, c in found.items()}
    assert "rbac:readiness" not in status or status["rbac:readiness"] == "green", found.get("rbac:readiness")
    nominal = nominal_gpus(kube.list(k8s.CLUSTERQUEUE))
    for flavor in (world.h100, world.a100):
        want = sum(nominal[flavor.name].values())
        check = found[f"quota:{flavor.name}"]
        assert check["detail"].startswith(f"{want} nominal nvidia.com/gpu"), check
        assert "8 allocatable on 1 node(s)" in check["detail"], check  # onboard: one node of 8 per flavor
        assert check["status"] == ("green" if want <= 8 else "amber"), check
    # The ConfigMap may be read now, but this plane passes Kueue its file directly: the webhook answers.
    assert status["kueue:rayservice"] == "green" and "was not found" in found["kueue:rayservice"]["detail"]


def test_kueue_down_is_red_on_the_page_and_a_deployment_waits_then_runs_once_it_is_back(world, kube):
    onboard(kube, world.h100)
    kube.plane.stop_kueue()
    try:
        kueue = checks()["controller:kueue"]
        assert kueue["status"] == "red" and "does not answer" in kueue["detail"], kueue
        assert "every Deployment in tenant namespaces" in kueue["detail"]

        # Kueue's RayService webhook is failurePolicy Fail: nothing reaches the cluster unqueued.
        # The reconcile raises for Celery to retry with backoff, and says why on the deployment.
        dep = request_and_approve(world, flavor=world.h100)
        with pytest.raises(k8s.TransientClusterError):
            reconcile(dep)
        dep.refresh_from_db()
        assert dep.state == State.APPROVED and kube.get(k8s.RAYSERVICE, dep.resource_name, dep.tenant.namespace) is None
        assert dep.status_message.startswith("Retrying: the cluster refused for now:"), dep.status_message
        assert '"mrayservice.kb.io"' in dep.status_message  # Kueue's webhook, named
        assert dep.reserved_gpus == dep.gpus_needed  # the reservation is kept while it retries
    finally:
        kube.plane.start_kueue()

    assert checks()["controller:kueue"]["status"] != "red"
    converge(kube, dep, lambda d: d.state == State.READY, timeout=90, what="ready once Kueue is back")
    assert condition(workload_of(kube, dep), "Admitted").get("status") == "True"
