"""The API server's semantics the portal relies on, on the emulator and on kube-apiserver 1.36.

One scenario, run on both backends; the answers must be equal. Defined upstream in
kubernetes/kubernetes (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go:
create → 201 / AlreadyExists, get/delete → NotFound; staging/src/k8s.io/apiextensions-apiserver/
pkg/registry/customresource/strategy.go `PrepareForUpdate`: generation moves only when
something outside metadata and status changes; staging/src/k8s.io/apimachinery/pkg/util/
managedfields: server-side apply creates a missing object and removes the fields a manager no
longer applies). The emulator's documented gaps are asserted as gaps below, so a change on
either side shows.
"""

from __future__ import annotations

import pytest

from runtime import k8s
from tests.cluster.contract import BACKENDS, PRIORITY_CLASS, Backend, backend_for


@pytest.fixture(params=BACKENDS)
def backend(request) -> Backend:
    return backend_for(request)


@pytest.fixture
def priority_classes(monkeypatch):
    """Let the portal's Cluster.apply address WorkloadPriorityClass (a kind it never applies):
    the semantics under test are the API server's, whatever the kind."""
    from runtime.k8s import kinds

    monkeypatch.setitem(kinds._KINDS_BY_TYPE, (PRIORITY_CLASS.api_version, PRIORITY_CLASS.kind), PRIORITY_CLASS)


def priority_class(name: str, value: int, *, labels=None, annotations=None, description=None) -> dict:
    obj = {
        "apiVersion": PRIORITY_CLASS.api_version,
        "kind": PRIORITY_CLASS.kind,
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "value": value,
    }
    if description is not None:
        obj["description"] = description
    return obj


def api_semantics(b: Backend) -> dict:
    """What the portal's Cluster sees through one object's life."""
    c, seen = b.cluster, {}
    seen["get_missing"] = c.get(PRIORITY_CLASS, "contract-a")
    seen["delete_missing"] = c.delete(PRIORITY_CLASS, "contract-a")
    with pytest.raises(k8s.NotFound) as missing:
        c._custom("get", "get", PRIORITY_CLASS, None, "contract-a")
    seen["not_found"] = (missing.value.status, str(missing.value))

    calls_before = dict(c.calls)
    first = c.apply(
        priority_class("contract-a", 10, labels={"tier": "gold", "drop": "me"}, annotations={"a": "1"}, description="x")
    )
    seen["apply_creates_without_fallback"] = c.calls.get("create", 0) - calls_before.get("create", 0) == 0
    seen["created"] = (first["metadata"]["generation"], bool(first["metadata"]["uid"]), first["value"])

    again = c.apply(
        priority_class("contract-a", 10, labels={"tier": "gold", "drop": "me"}, annotations={"a": "1"}, description="x")
    )
    seen["same_apply_is_a_no_op"] = (
        again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"],
        again["metadata"]["generation"],
    )

    b.merge_patch(PRIORITY_CLASS, "contract-a", None, {"metadata": {"labels": {"theirs": "kept"}}})
    labels_only = c.apply(priority_class("contract-a", 10, labels={"tier": "gold"}, description="x"))
    seen["metadata_change"] = (
        labels_only["metadata"]["generation"],
        labels_only["metadata"]["resourceVersion"] != again["metadata"]["resourceVersion"],
        # Dropped from the manifest: gone; written by another writer: kept.
        labels_only["metadata"].get("labels"),
        labels_only["metadata"].get("annotations") or {},
    )

    dropped = c.apply(priority_class("contract-a", 20, labels={"tier": "gold"}))
    seen["spec_change"] = (dropped["metadata"]["generation"], dropped["value"], "description" in dropped)

    with pytest.raises(k8s.ClusterError) as conflict:
        c._create(PRIORITY_CLASS, None, priority_class("contract-a", 1))
    seen["create_existing"] = (conflict.value.status, str(conflict.value))

    c.apply(priority_class("contract-b", 5, labels={"tier": "silver"}))
    raw = c._custom("list", "list", PRIORITY_CLASS, None, label_selector="tier=gold")
    seen["server_side_selector"] = sorted(
        i["metadata"]["name"] for i in raw["items"] if i["metadata"]["name"].startswith("contract-")
    )
    raw = c._custom("list", "list", PRIORITY_CLASS, None, label_selector="tier in (gold,silver),!theirs")
    seen["set_selector"] = sorted(
        i["metadata"]["name"] for i in raw["items"] if i["metadata"]["name"].startswith("contract-")
    )

    seen["delete"] = (c.delete(PRIORITY_CLASS, "contract-a"), c.get(PRIORITY_CLASS, "contract-a"))
    seen["recreated_generation"] = c.apply(priority_class("contract-a", 1))["metadata"]["generation"]
    return seen


EXPECTED = {
    "get_missing": None,
    "delete_missing": False,
    "not_found": (404, '404 Not Found: workloadpriorityclasses.kueue.x-k8s.io "contract-a" not found'),
    "apply_creates_without_fallback": True,
    "created": (1, True, 10),
    "same_apply_is_a_no_op": (True, 1),
    "metadata_change": (1, True, {"tier": "gold", "theirs": "kept"}, {}),
    "spec_change": (2, 20, False),
    "create_existing": (409, '409 Conflict: workloadpriorityclasses.kueue.x-k8s.io "contract-a" already exists'),
    "server_side_selector": ["contract-a"],
    "set_selector": ["contract-b"],
    "delete": (True, None),
    "recreated_generation": 1,
}


def test_the_api_server_semantics_the_portal_relies_on(backend, priority_classes):
    assert api_semantics(backend) == EXPECTED


def test_a_status_write_does_not_move_generation(backend, world):
    """A controller's status write (the status subresource) leaves generation alone."""
    from quotas.kueue import sync_kueue

    sync_kueue()  # the tenant namespace and its LocalQueue
    lq = backend.cluster.get(k8s.LOCALQUEUE, "alpha", "alpha")
    after = backend.other.patch_status(k8s.LOCALQUEUE, "alpha", "alpha", {"pendingWorkloads": 0})
    assert after["metadata"]["generation"] == lq["metadata"]["generation"] == 1


def test_documented_gap_objects_in_a_missing_namespace(backend):
    """The real server refuses an object in a namespace that does not exist (404); the emulator
    stores it (documented in tests/support/k8s/emulator.py). The portal waits on the 404
    (runtime.backends: missing namespace), which fast tests model with `undeclare`/faults."""
    body = {
        "apiVersion": k8s.LOCALQUEUE.api_version,
        "kind": "LocalQueue",
        "metadata": {"name": "q", "namespace": "no-such-namespace"},
        "spec": {"clusterQueue": "none"},
    }
    if backend.name == "real":
        with pytest.raises(k8s.NotFound, match='namespaces "no-such-namespace" not found'):
            backend.cluster.apply(body)
    else:
        assert backend.cluster.apply(body)["metadata"]["generation"] == 1
