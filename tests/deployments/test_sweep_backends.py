"""A backend that is not installed on the cluster is no error: the sweep goes on without it.

KServe's CRD is absent here (`undeclare`: the API test server then answers a LIST of
InferenceServices with 404, as a real API server does for a resource type it does not serve).
The sweep still reads the queues and records positions for the KubeRay deployments, records the
absent backend once (one warning per process, not one per sweep), the Cluster page and API say
so, and a request for it is refused on its field without asking the cluster again.
"""

import logging

import pytest

from deployments.models import ModelDeployment
from deployments.sweep import last_pending_workloads, sweep
from runtime import backends, k8s
from tests.deployments.test_sweep_queue import queued_three
from tests.support.factories import api_draft

ABSENT = "backend kserve is not installed on the cluster"


@pytest.fixture(autouse=True)
def _forget_presence():
    """What a sweep learns lives in the cache and a per-process set: none of it leaks between tests."""
    from django.core.cache import cache

    def forget():
        cache.delete_many([backends.PRESENCE_KEY.format(n) for n in backends.names()])
        backends._warned_absent.clear()

    forget()
    yield
    forget()


def isvc_lists(api) -> list[str]:
    return [path for method, path in api.proxied_requests() if method == "GET" and path.endswith("/inferenceservices")]


class TestSweepWithoutKServe:
    def test_it_completes_records_queue_positions_and_says_once_that_kserve_is_missing(
        self, world, cluster_api, caplog
    ):
        deps = queued_three(world, cluster_api)
        cluster_api.undeclare(k8s.INFERENCESERVICE)
        assert isvc_lists(cluster_api) == []
        with caplog.at_level(logging.WARNING, logger="runtime.backends"):
            reports = [sweep(), sweep()]
        assert [r["not_installed"] for r in reports] == [["kserve"], ["kserve"]]
        assert [(r["checked"], r["errors"]) for r in reports] == [(3, []), (3, [])]
        # One 404 per sweep, not one per tenant namespace (alpha and beta).
        assert len(isvc_lists(cluster_api)) == 2
        last = ModelDeployment.objects.get(pk=deps[2].pk)
        queue = last.condition("Admitted")["queue"]
        assert (queue["position"], queue["of"], queue["gpusAhead"]) == (3, 3, 6)
        assert [w["position"] for w in last_pending_workloads()["tenant-alpha"]["workloads"]] == [1, 2, 3]
        assert [r.getMessage() for r in caplog.records if ABSENT in r.getMessage()] == [
            f"{ABSENT}: the cluster does not serve the InferenceService resource type "
            "(serving.kserve.io/v1beta1/inferenceservices)"
        ]
        found = backends.presence()
        assert (found["kuberay"]["installed"], found["kserve"]["installed"]) == (True, False)

    def test_the_cluster_page_and_api_say_which_backend_is_missing(self, world, cluster_api):
        cluster_api.undeclare(k8s.INFERENCESERVICE)
        sweep()
        page = world.browser("platform_admin").get("/cluster/").content.decode()
        assert 'data-backend-absent="kserve"' in page
        assert "Backend kserve is not installed on the cluster" in page
        assert 'data-backend-absent="kuberay"' not in page
        body = world.client("platform_admin").get("/api/v1/cluster/sweep/").json()
        assert body["backends"]["kserve"]["installed"] is False
        assert body["backends"]["kuberay"]["installed"] is True

    def test_once_installed_again_the_next_sweep_lists_it_and_logs_that(self, world, cluster_api, caplog):
        cluster_api.undeclare(k8s.INFERENCESERVICE)
        sweep()
        cluster_api.declare(k8s.INFERENCESERVICE.key, k8s.INFERENCESERVICE.kind)
        with caplog.at_level(logging.INFO, logger="runtime.backends"):
            report = sweep()
        assert report["not_installed"] == []
        assert backends.presence()["kserve"]["installed"] is True
        assert "backend kserve is installed on the cluster again" in caplog.text


class TestRequestsForAnAbsentBackend:
    def test_the_api_refuses_it_on_the_backend_field_without_asking_the_cluster(self, world, cluster_api):
        cluster_api.undeclare(k8s.INFERENCESERVICE)
        sweep()
        seen = len(cluster_api.proxied_requests())
        response = world.client("member").post(
            "/api/v1/deployments/", api_draft(world, name="isvc", backend="kserve"), format="json"
        )
        assert response.status_code == 400
        assert list(response.json()) == ["backend"]
        assert "Backend 'kserve' is not installed on the cluster" in response.json()["backend"][0]
        assert len(cluster_api.proxied_requests()) == seen
        assert not ModelDeployment.objects.filter(name="isvc").exists()
        ok = world.client("member").post("/api/v1/deployments/", api_draft(world, name="ray"), format="json")
        assert ok.status_code == 201

    def test_the_form_marks_the_choice_and_shows_the_error_on_the_field(self, world, cluster_api):
        cluster_api.undeclare(k8s.INFERENCESERVICE)
        sweep()
        browser = world.browser("member")
        assert (
            "KServe InferenceService (not installed on the cluster)"
            in browser.get("/deployments/new/").content.decode()
        )
        data = {k: ("" if v is None else v) for k, v in api_draft(world, name="isvc", backend="kserve").items()}
        data.update(flavor=world.h100.pk, tenant=world.alpha.pk, enable_chunked_prefill="on")
        response = browser.post("/deployments/new/", data)
        assert response.status_code == 200
        assert "is not installed on the cluster" in str(response.context["form"].errors["backend"])
        assert not ModelDeployment.objects.filter(name="isvc").exists()

    def test_before_any_sweep_nothing_is_known_and_nothing_is_refused(self, world, cluster_api):
        assert backends.presence()["kserve"]["installed"] is None
        response = world.client("member").post(
            "/api/v1/deployments/", api_draft(world, name="isvc", backend="kserve"), format="json"
        )
        assert response.status_code == 201
