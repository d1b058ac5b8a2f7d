"""The cluster layer over real HTTP: the `kubernetes` client against the kmock test server.

Faults come from the test server's proxy (tests/support/k8s/faults.py), so every error here travels the
same path a real one does: socket → urllib3 → kubernetes client → runtime.k8s.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from runtime import k8s
from runtime.k8s import (
    ClusterError,
    NotFound,
    PermanentClusterError,
    TransientClusterError,
)
from runtime.manifests.common import LABEL_JOB_UID, LABEL_QUEUE_NAME
from tests.support import crd, operators
from tests.support.k8s import DROP, HANG, K8sApiServer
from tests.support.processes import free_port

NS = "tenant-a"


def rayservice(name: str = "llm", ns: str = NS, *, replicas: int = 1, **labels: str) -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name, "namespace": ns, "labels": {LABEL_QUEUE_NAME: "lq", **labels}},
        "spec": {"serveConfigV2": "applications: []\n", "replicas": replicas},
    }


@pytest.fixture
def cluster(k8s_api: K8sApiServer) -> k8s.Cluster:
    # Generous: a loaded 2-core CI machine once took over 0.5 s to answer a create here. The
    # hang tests make their own short-timeout client.
    return k8s_api.cluster(timeout=5.0)


class TestApply:
    def test_it_creates_a_missing_object_with_server_metadata(self, cluster, k8s_api):
        created = cluster.apply(rayservice())

        stored = k8s_api.get_object(k8s.RAYSERVICE, "llm", NS)
        assert stored is not None
        assert stored["spec"]["replicas"] == 1
        assert created["metadata"]["uid"] == stored["metadata"]["uid"]
        assert created["metadata"]["generation"] == 1

    def test_applying_twice_keeps_one_object_with_the_latest_spec(self, cluster, k8s_api):
        first = cluster.apply(rayservice(replicas=1))
        second = cluster.apply(rayservice(replicas=3))

        objects = k8s_api.list_objects(k8s.RAYSERVICE, NS)
        assert [o["metadata"]["name"] for o in objects] == ["llm"]
        assert objects[0]["spec"]["replicas"] == 3
        assert second["metadata"]["uid"] == first["metadata"]["uid"]
        assert second["metadata"]["generation"] == 2

    def test_reapplying_the_same_manifest_changes_nothing(self, cluster):
        cluster.apply(rayservice())
        again = cluster.apply(rayservice())

        assert again["metadata"]["generation"] == 1

    def test_it_applies_server_side_as_the_portal_with_force(self, cluster, k8s_api):
        cluster.apply(rayservice())
        cluster.apply(rayservice(replicas=2))

        patches = [r for r in k8s_api.emulator if r.method == "PATCH"]
        assert patches, "apply must be a PATCH"
        for request in patches:
            assert request.headers["Content-Type"] == "application/apply-patch+yaml"
            assert request.params["fieldManager"] == k8s.FIELD_MANAGER
            assert request.params["force"] == "true"

    def test_apply_creates_a_missing_object_as_a_real_server_does(self, cluster):
        cluster.apply(rayservice())
        cluster.apply(rayservice(replicas=2))

        # Server-side apply creates (tests/cluster/test_contract_api.py holds the emulator to it).
        assert cluster.calls == {"apply": 2}

    def test_it_falls_back_to_create_only_when_apply_answers_404(self, cluster, k8s_api):
        k8s_api.inject_faults(1.0, (404,), when=lambda method, _path: method == "PATCH")
        cluster.apply(rayservice())
        k8s_api.clear_faults()
        cluster.apply(rayservice(replicas=2))

        assert cluster.calls == {"apply": 2, "create": 1}

    def test_it_applies_cluster_scoped_kinds_and_namespaces(self, cluster, k8s_api):
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        cluster.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": "cq-a"},
                "spec": {"cohortName": "llm-serving"},
            }
        )

        assert k8s_api.get_object(k8s.NAMESPACE, NS) is not None
        assert k8s_api.get_object(k8s.CLUSTERQUEUE, "cq-a")["spec"]["cohortName"] == "llm-serving"

    def test_it_refuses_a_kind_it_does_not_know(self, cluster):
        with pytest.raises(ValueError, match="unknown kind"):
            cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "p"}})
        assert sum(cluster.calls.values()) == 0

    def test_api_key_secrets_are_written_in_a_namespace_and_never_read(self, cluster):
        # The access app's key Secrets: applied and deleted in the key namespace, never read back.
        with pytest.raises(ValueError, match="namespaced"):
            cluster.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "p"}})
        with pytest.raises(ValueError, match="does not read Secret"):
            cluster.get(k8s.SECRET, "p", NS)
        assert sum(cluster.calls.values()) == 0

    def test_pods_are_only_ever_listed(self, cluster):
        # The portal reads Ray pods for metrics and must never write one (RBAC grants list only).
        with pytest.raises(ValueError, match="never writes Pod"):
            cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}})
        with pytest.raises(ValueError, match="does not read Pod"):
            cluster.get(k8s.POD, "p", NS)
        assert sum(cluster.calls.values()) == 0
        assert cluster.list(k8s.POD, NS) == [] and cluster.calls["list"] == 1

    def test_read_only_core_kinds_are_never_written_or_deleted(self, cluster):
        for kind in (k8s.EVENT, k8s.NODE, k8s.PVC, k8s.CONFIGMAP):
            meta = {"name": "x", "namespace": NS} if kind.namespaced else {"name": "x"}
            with pytest.raises(ValueError, match=f"never writes {kind.kind}"):
                cluster.apply({"apiVersion": "v1", "kind": kind.kind, "metadata": meta})
            with pytest.raises(ValueError, match=f"never writes {kind.kind}"):
                cluster.delete(kind, "x", NS)
        with pytest.raises(ValueError, match="does not list PersistentVolumeClaim"):
            cluster.list(k8s.PVC, NS)
        assert sum(cluster.calls.values()) == 0


class TestGet:
    def test_a_missing_object_is_none(self, cluster):
        assert cluster.get(k8s.RAYSERVICE, "nope", NS) is None
        assert cluster.get(k8s.CLUSTERQUEUE, "nope") is None
        assert cluster.get(k8s.NAMESPACE, "nope") is None

    def test_it_returns_the_stored_object_as_a_plain_dict(self, cluster, k8s_api):
        k8s_api.put(k8s.RAYSERVICE, rayservice())

        got = cluster.get(k8s.RAYSERVICE, "llm", NS)

        assert type(got) is dict
        assert got["spec"]["replicas"] == 1

    def test_a_namespaced_kind_needs_a_namespace(self, cluster):
        with pytest.raises(ValueError, match="namespaced"):
            cluster.get(k8s.RAYSERVICE, "llm")


class TestList:
    def test_it_lists_one_namespace_and_filters_by_labels(self, cluster, k8s_api):
        k8s_api.put(k8s.RAYSERVICE, rayservice("a", tenant="a"))
        k8s_api.put(k8s.RAYSERVICE, rayservice("b", tenant="b"))
        k8s_api.put(k8s.RAYSERVICE, rayservice("c", "tenant-b", tenant="a"))

        names = {o["metadata"]["name"] for o in cluster.list(k8s.RAYSERVICE, NS)}
        filtered = cluster.list(k8s.RAYSERVICE, NS, label_selector={"tenant": "a"})

        assert names == {"a", "b"}
        assert [o["metadata"]["name"] for o in filtered] == ["a"]

    def test_without_a_namespace_it_lists_all_namespaces(self, cluster, k8s_api):
        k8s_api.put(k8s.RAYSERVICE, rayservice("a", tenant="a"))
        k8s_api.put(k8s.RAYSERVICE, rayservice("c", "tenant-b", tenant="a"))

        found = cluster.list(k8s.RAYSERVICE, label_selector={"tenant": "a"})

        assert {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in found} == {
            (NS, "a"),
            ("tenant-b", "c"),
        }

    def test_it_still_sends_the_selector_for_a_real_api_server(self, cluster, k8s_api):
        cluster.list(k8s.WORKLOAD, NS, label_selector={LABEL_JOB_UID: "u1", "b": "2"})

        (request,) = [r for r in k8s_api.emulator if r.method == "GET"]
        assert request.params["labelSelector"] == f"b=2,{LABEL_JOB_UID}=u1"

    def test_it_finds_the_workload_of_a_rayservice_by_job_uid(self, cluster, k8s_api):
        mine = cluster.apply(rayservice("mine"))
        other = cluster.apply(rayservice("other"))
        operators.workload_for(k8s_api, mine, {"QuotaReserved": True, "Admitted": True})
        operators.workload_for(k8s_api, other, {"QuotaReserved": False})

        found = cluster.list(k8s.WORKLOAD, NS, label_selector={LABEL_JOB_UID: mine["metadata"]["uid"]})

        assert len(found) == 1
        admitted = {c["type"]: c["status"] for c in found[0]["status"]["conditions"]}
        assert admitted == {"QuotaReserved": "True", "Admitted": "True"}


class TestDelete:
    def test_it_deletes_then_reports_already_gone(self, cluster, k8s_api):
        cluster.apply(rayservice())

        assert cluster.delete(k8s.RAYSERVICE, "llm", NS) is True
        assert k8s_api.get_object(k8s.RAYSERVICE, "llm", NS) is None
        assert cluster.delete(k8s.RAYSERVICE, "llm", NS) is False

    def test_it_deletes_cluster_scoped_objects_and_namespaces(self, cluster, k8s_api):
        k8s_api.put(k8s.RESOURCEFLAVOR, {"metadata": {"name": "h100"}})
        k8s_api.put(k8s.NAMESPACE, {"metadata": {"name": NS}})

        assert cluster.delete(k8s.RESOURCEFLAVOR, "h100") is True
        assert cluster.delete(k8s.NAMESPACE, NS) is True
        assert cluster.get(k8s.RESOURCEFLAVOR, "h100") is None
        assert cluster.delete(k8s.NAMESPACE, NS) is False


class TestPatchStatus:
    def test_it_merges_status_without_bumping_generation(self, cluster):
        cluster.apply(rayservice())

        cluster.patch_status(k8s.RAYSERVICE, "llm", NS, {"observedGeneration": 1})
        patched = cluster.patch_status(k8s.RAYSERVICE, "llm", NS, {"numServeEndpoints": 2})

        assert patched["status"] == {"observedGeneration": 1, "numServeEndpoints": 2}
        assert patched["metadata"]["generation"] == 1

    def test_patching_the_status_of_a_missing_object_is_not_found(self, cluster):
        with pytest.raises(NotFound):
            cluster.patch_status(k8s.RAYSERVICE, "nope", NS, {"numServeEndpoints": 0})


class TestErrorClassification:
    @pytest.mark.parametrize(
        ("fault", "expected"),
        [
            (500, TransientClusterError),
            (503, TransientClusterError),
            (429, TransientClusterError),
            (400, PermanentClusterError),
            (403, PermanentClusterError),
            (409, PermanentClusterError),
            (422, PermanentClusterError),
        ],
    )
    def test_http_status_decides_the_kind(self, cluster, k8s_api, fault, expected):
        k8s_api.fail_always(fault)

        with pytest.raises(ClusterError) as caught:
            cluster.apply(rayservice())

        assert type(caught.value) is expected
        assert caught.value.status == fault
        # The API server's own Status message reaches the user, not just "Forbidden".
        assert f"fault injected: {fault}" in str(caught.value)
        # Only the faulty request went out: a 403 is not "missing", so no create fallback.
        assert sum(cluster.calls.values()) == 1

    def test_not_found_is_permanent(self, cluster, k8s_api):
        k8s_api.fail_always(404)

        with pytest.raises(NotFound) as caught:
            cluster.list(k8s.RAYSERVICE, NS)

        assert isinstance(caught.value, PermanentClusterError)

    def test_a_hung_request_times_out_as_transient_without_hidden_retries(self, k8s_api):
        cluster = k8s_api.cluster(timeout=0.5)
        k8s_api.fail_always(HANG)
        started = time.monotonic()

        with pytest.raises(TransientClusterError, match="Timeout"):
            cluster.get(k8s.RAYSERVICE, "llm", NS)

        # urllib3's default Retry(3) would take 4 × 0.5 s; we want one attempt.
        assert time.monotonic() - started < 1.5
        assert k8s_api.injected[HANG] == 1

    def test_a_dropped_connection_is_transient(self, cluster, k8s_api):
        k8s_api.fail_always(DROP)

        with pytest.raises(TransientClusterError):
            cluster.apply(rayservice())

        assert k8s_api.injected[DROP] == 1
        assert k8s_api.get_object(k8s.RAYSERVICE, "llm", NS) is None

    def test_a_refused_connection_is_transient(self):
        cluster = k8s.Cluster.for_url(f"http://127.0.0.1:{free_port()}", timeout=0.5)

        with pytest.raises(TransientClusterError):
            cluster.get(k8s.RAYSERVICE, "llm", NS)

    def test_a_faulted_write_changes_nothing(self, cluster, k8s_api):
        # The proxy answers before the store: a 429 from a real server changed nothing either.
        cluster.apply(rayservice(replicas=1))
        k8s_api.fail_always(429)

        with pytest.raises(TransientClusterError):
            cluster.apply(rayservice(replicas=5))

        assert k8s_api.get_object(k8s.RAYSERVICE, "llm", NS)["spec"]["replicas"] == 1


class TestClassifyException:
    @pytest.mark.parametrize(
        ("exc", "expected"),
        [
            (ApiException(status=502, reason="Bad Gateway"), TransientClusterError),
            (ApiException(status=408, reason="Request Timeout"), TransientClusterError),
            (ApiException(status=401, reason="Unauthorized"), PermanentClusterError),
            (ApiException(status=404, reason="Not Found"), NotFound),
            (ApiException(status=0, reason="SSLError"), PermanentClusterError),
            (
                urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"),
                TransientClusterError,
            ),
            (urllib3.exceptions.ProtocolError("Connection aborted."), TransientClusterError),
            (urllib3.exceptions.SSLError("certificate verify failed"), PermanentClusterError),
            (ConnectionResetError(104, "reset"), TransientClusterError),
            (TimeoutError(), TransientClusterError),
        ],
    )
    def test_it_maps_client_and_socket_errors(self, exc, expected):
        assert type(k8s.classify_exception(exc)) is expected

    def test_max_retry_error_is_judged_by_its_reason(self):
        ssl = urllib3.exceptions.SSLError("certificate verify failed")
        wrapped = urllib3.exceptions.MaxRetryError(None, "/", reason=ssl)

        assert type(k8s.classify_exception(wrapped)) is PermanentClusterError

    def test_programming_errors_are_not_ours(self):
        assert k8s.classify_exception(KeyError("x")) is None


class TestRetryTransient:
    def test_it_converges_through_thirty_percent_faults(self, k8s_api):
        cluster = k8s_api.cluster(timeout=0.3)
        k8s_api.inject_faults(0.3, seed=7)

        for i in range(15):
            k8s.retry_transient(
                lambda i=i: cluster.apply(rayservice(f"llm-{i}", replicas=2)),
                attempts=10,
                backoff=0.0,
            )

        k8s_api.clear_faults()
        stored = k8s_api.list_objects(k8s.RAYSERVICE, NS)
        assert sorted(o["metadata"]["name"] for o in stored) == sorted(f"llm-{i}" for i in range(15))
        assert all(o["spec"]["replicas"] == 2 for o in stored)
        injected = k8s_api.injected
        assert sum(injected.values()) >= 5, injected  # the test must really have seen faults
        assert len(injected) >= 3, injected  # and more than one kind of them

    def test_it_backs_off_then_gives_up(self, cluster, k8s_api):
        k8s_api.fail_always(503)
        pauses: list[float] = []

        with pytest.raises(TransientClusterError):
            k8s.retry_transient(
                lambda: cluster.get(k8s.RAYSERVICE, "llm", NS),
                attempts=4,
                backoff=0.5,
                max_backoff=1.5,
                sleep=pauses.append,
            )

        assert pauses == [0.5, 1.0, 1.5]
        assert cluster.calls["get"] == 4

    def test_it_does_not_retry_permanent_errors(self, cluster, k8s_api):
        k8s_api.fail_always(422)

        with pytest.raises(PermanentClusterError):
            k8s.retry_transient(lambda: cluster.apply(rayservice()), sleep=lambda _: None)

        assert cluster.calls == {"apply": 1}


class TestConstruction:
    def test_from_settings_prefers_the_url(self, settings, k8s_api):
        settings.KUBERNETES_URL = k8s_api.url
        settings.KUBECONFIG = "/nonexistent/kubeconfig"
        settings.KUBERNETES_TIMEOUT_SECONDS = 3.5

        cluster = k8s.Cluster.from_settings()

        assert cluster.timeout == 3.5
        assert cluster.get(k8s.RAYSERVICE, "llm", NS) is None

    def test_from_settings_reads_a_kubeconfig(self, settings, k8s_api, tmp_path):
        kubeconfig = tmp_path / "config"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
            f"clusters: [{{name: test, cluster: {{server: '{k8s_api.url}'}}}}]\n"
            "users: [{name: test, user: {token: abc}}]\n"
            "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
        )
        settings.KUBERNETES_URL = None
        settings.KUBECONFIG = str(kubeconfig)

        cluster = k8s.Cluster.from_settings()
        cluster.apply(rayservice())

        (request,) = [r for r in k8s_api.emulator if r.method == "PATCH"]
        assert request.headers["Authorization"] == "Bearer abc"

    def test_every_call_carries_the_timeout(self, k8s_api):
        cluster = k8s_api.cluster(timeout=0.2)
        k8s_api.fail_always(HANG)
        started = time.monotonic()

        for call in (
            lambda: cluster.apply(rayservice()),
            lambda: cluster.list(k8s.RAYSERVICE, NS),
            lambda: cluster.delete(k8s.RAYSERVICE, "llm", NS),
            lambda: cluster.patch_status(k8s.RAYSERVICE, "llm", NS, {}),
        ):
            with pytest.raises(TransientClusterError):
                call()

        assert time.monotonic() - started < 2.0


def assert_status_valid(obj: dict[str, Any]) -> None:
    """`obj["status"]` fits the CRD's status schema: types, enums, no pruned fields."""
    schema = crd.served_schema(obj["apiVersion"], obj["kind"])["properties"]["status"]
    crd.validate(obj["status"], schema)
    assert crd.unknown_fields(obj["status"], schema) == []


class TestSimulatedOperators:
    """The fixtures other tests build on must write what the real controllers write."""

    def test_a_ready_rayservice_has_ready_true_at_the_current_generation(self, cluster, k8s_api):
        cluster.apply(rayservice(replicas=1))
        applied = cluster.apply(rayservice(replicas=2))

        operators.rayservice_ready(k8s_api, NS, "llm")
        got = cluster.get(k8s.RAYSERVICE, "llm", NS)

        assert _conditions(got)["Ready"] == "True"
        assert got["status"]["observedGeneration"] == applied["metadata"]["generation"] == 2
        assert got["metadata"]["generation"] == 2  # a status write is not a spec change
        assert_status_valid(got)

    def test_app_failure_shows_in_application_statuses_not_conditions(self, cluster, k8s_api):
        cluster.apply(rayservice())
        operators.rayservice_ready(k8s_api, NS, "llm")

        operators.rayservice_app_status(k8s_api, NS, "llm", "llm", "DEPLOY_FAILED", "OOM")
        got = cluster.get(k8s.RAYSERVICE, "llm", NS)

        app = got["status"]["activeServiceStatus"]["applicationStatuses"]["llm"]
        assert app == {"status": "DEPLOY_FAILED", "message": "OOM"}
        assert _conditions(got)["Ready"] == "True"  # KubeRay leaves Ready alone
        assert_status_valid(got)

    def test_not_ready_keeps_the_reason_and_moves_the_transition_time_once(self, k8s_api):
        k8s_api.put(k8s.RAYSERVICE, rayservice())

        first = operators.rayservice_not_ready(k8s_api, NS, "llm", "ValidationFailed", "bad")
        again = operators.rayservice_not_ready(k8s_api, NS, "llm", "ValidationFailed", "bad")

        (ready,) = [c for c in again["status"]["conditions"] if c["type"] == "Ready"]
        assert (ready["status"], ready["reason"], ready["message"]) == (
            "False",
            "ValidationFailed",
            "bad",
        )
        assert ready["lastTransitionTime"] == first["status"]["conditions"][0]["lastTransitionTime"]
        assert_status_valid(again)

    def test_assign_uid_fixes_up_an_object_seeded_without_one(self, cluster, k8s_api):
        key = (k8s.RAYSERVICE.key, NS, "raw")
        k8s_api.call(lambda: k8s_api.emulator.objects.__setitem__(key, rayservice("raw")))

        uid = operators.assign_uid(k8s_api, k8s.RAYSERVICE, NS, "raw", uid="u-1")
        got = cluster.get(k8s.RAYSERVICE, "raw", NS)

        assert uid == got["metadata"]["uid"] == "u-1"
        assert got["metadata"]["generation"] == got["status"]["observedGeneration"] == 1

    def test_a_workload_tells_the_queue_story(self, cluster, k8s_api):
        rs = cluster.apply(rayservice())

        operators.workload_for(k8s_api, rs, {"QuotaReserved": False})
        (pending,) = cluster.list(k8s.WORKLOAD, NS, label_selector={LABEL_JOB_UID: rs["metadata"]["uid"]})
        name = pending["metadata"]["name"]
        operators.workload_set_conditions(k8s_api, NS, name, {"QuotaReserved": True, "Admitted": True})
        admitted = cluster.get(k8s.WORKLOAD, name, NS)

        assert _conditions(pending) == {"QuotaReserved": "False"}
        assert "insufficient unused quota" in pending["status"]["conditions"][0]["message"]
        assert _conditions(admitted) == {"QuotaReserved": "True", "Admitted": "True"}
        assert pending["spec"]["queueName"] == "lq"
        assert_status_valid(pending)
        assert_status_valid(operators.workload_for(k8s_api, rs, {"Admitted": True}))


def test_fixture_starts_fast(k8s_api: K8sApiServer) -> None:
    # A function-scoped server is only reasonable while it stays cheap.
    assert k8s_api.startup_seconds < 0.5


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj["status"]["conditions"]}


class TestTestServerCost:
    """tests/support/k8s/emulator.py keeps kmock's per-request cost flat (bench/README.md, B2)."""

    def test_reactions_are_matched_against_the_current_request_only(self, k8s_api):
        import requests

        history_lengths = []

        def respond(request: Any) -> dict[str, bool]:
            history_lengths.append(len(list(k8s_api.emulator)))
            return {"ok": True}

        k8s_api.call(lambda: k8s_api.emulator["get /probe"] << respond)
        answers = [requests.get(k8s_api.direct_url + "/probe", timeout=5) for _ in range(3)]

        assert [a.json() for a in answers] == [{"ok": True}] * 3
        assert history_lengths == [1, 1, 1]  # while handling, the history is this request
        assert [path for _, path in k8s_api.requests()] == ["/probe"] * 3  # afterwards, all

    def test_objects_are_found_by_key_however_they_were_stored(self, cluster, k8s_api):
        seeded = k8s_api.put(k8s.RAYSERVICE, rayservice("seeded"))
        created = cluster.apply(rayservice("created"))

        assert cluster.get(k8s.RAYSERVICE, "seeded", NS)["metadata"]["uid"] == seeded["metadata"]["uid"]
        assert cluster.get(k8s.RAYSERVICE, "created", NS)["metadata"]["uid"] == created["metadata"]["uid"]
        assert cluster.get(k8s.RAYSERVICE, "seeded", "elsewhere") is None
        assert cluster.delete(k8s.RAYSERVICE, "seeded", NS)
        assert cluster.get(k8s.RAYSERVICE, "seeded", NS) is None
