"""Emptying a test's tenant namespaces at once, the namespace controller's walk without its waits.

kube-controller-manager starts on a deleted namespace only 5 s after the deletion
(`namespaceDeletionGracePeriod`: time for other API servers' lifecycle admission and for etcd
followers to catch up; there is one of each here), and when a pass leaves objects that carry
finalizers (a claim's `kubernetes.io/pvc-protection`, Kueue's) or pods still inside their grace
period, it comes back only after `estimate/2 + 1` s: 8 s for a finalizer (`finalizerEstimateSeconds`
15), 16 s for a pod's default 30 s grace (kubernetes/kubernetes v1.36.2
pkg/controller/namespace/namespace_controller.go `enqueueNamespace`, `worker`;
pkg/controller/namespace/deletion/namespaced_resources_deleter.go `deleteAllContentForGroupVersionResource`,
`estimateGracefulTerminationForPods`). That was 10 to 16 s of every real-plane test's teardown.

`empty_namespaces` runs the same walk now: every namespaced resource that discovery lists with
`list` and `deletecollection`, in each group's preferred version (`ServerPreferredNamespacedResources`),
deleted by collection, pass after pass until one full pass finds every collection empty, so what
other controllers hold with finalizers is gone, not orphaned. Only then does it remove the
namespace's own `kubernetes` finalizer (`finalizeNamespace`, as the controller does) and delete
the namespace again, which the registry now does at once (pkg/registry/core/namespace/storage/
storage.go `Delete`: a terminating namespace goes once its spec.finalizers are empty). The
namespaces are deleted first, so the API server admits nothing new into them meanwhile
(NamespaceLifecycle admission refuses creates in a terminating namespace).
"""

from __future__ import annotations

import http.client
import json
import ssl
import time

# Pods go at once (`gracePeriodSeconds=0`: KWOK runs no process to stop); dependents are
# collected in the background, as the controller asks (`OrphanDependents: false`).
DELETE_QUERY = "propagationPolicy=Background&gracePeriodSeconds=0"


class ApiError(OSError):
    def __init__(self, status: int, method: str, path: str, body: bytes) -> None:
        super().__init__(f"{method} {path}: {status} {body[:300].decode(errors='replace')}")
        self.status = status


class Api:
    """One kept-alive HTTPS connection to the API server as admin. The walk makes a few hundred
    requests; `ControlPlane.request` opens a connection (and a TLS handshake) for each, about 5 ms
    against 1 ms here."""

    def __init__(self, plane) -> None:
        self.plane = plane
        self.context = ssl.create_default_context(cafile=str(plane.ca))
        self.conn: http.client.HTTPSConnection | None = None

    def __call__(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.plane.admin_token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(
                    "127.0.0.1", self.plane.ports["api"], context=self.context, timeout=30
                )
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, ConnectionError):
                self.close()  # the server closed a kept connection: once more on a new one
                if attempt:
                    raise
                continue
            if resp.status >= 400:
                raise ApiError(resp.status, method, path, raw)
            return json.loads(raw) if raw else {}
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def empty_namespaces(api: Api, names: list[str], *, timeout: float = 30) -> None:
    """Empty and finalize the already deleted (terminating) namespaces `names`; raises ApiError or
    AssertionError when that cannot finish, and then the namespace controller still does."""
    if not names:
        return
    collections = namespaced_collections(api)
    deadline = time.monotonic() + timeout
    pending = sorted(names)
    while pending:
        pending = [name for name in pending if not _emptied(api, name, collections)]
        if pending:
            if time.monotonic() > deadline:
                raise AssertionError(f"the content of namespaces {pending} remains after {timeout}s")
            time.sleep(0.1)


def namespaced_collections(api: Api) -> list[str]:
    """Path templates (`{ns}`) of every namespaced resource listed and deleted by collection."""
    bases = ["/api/v1"] + [f"/apis/{g['preferredVersion']['groupVersion']}" for g in api("GET", "/apis")["groups"]]
    paths = []
    for base in bases:
        for resource in api("GET", base)["resources"]:
            verbs = set(resource["verbs"])
            if resource["namespaced"] and "/" not in resource["name"] and {"list", "deletecollection"} <= verbs:
                paths.append(f"{base}/namespaces/{{ns}}/{resource['name']}")
    return paths


def _emptied(api: Api, namespace: str, collections: list[str]) -> bool:
    """One full pass over `namespace`: delete what is there; finalize it when nothing was."""
    remaining = 0
    for template in collections:
        path = template.format(ns=namespace)
        items = api("GET", path)["items"]
        remaining += len(items)
        if any(not item["metadata"].get("deletionTimestamp") for item in items):
            api("DELETE", f"{path}?{DELETE_QUERY}")
    if remaining:
        return False
    try:
        ns = api("GET", f"/api/v1/namespaces/{namespace}")
        ns["spec"]["finalizers"] = [f for f in ns["spec"].get("finalizers") or [] if f != "kubernetes"]
        api("PUT", f"/api/v1/namespaces/{namespace}/finalize", ns)
        if not ns["spec"]["finalizers"]:
            api("DELETE", f"/api/v1/namespaces/{namespace}")
    except ApiError as error:
        if error.status != 404:  # 404: the namespace controller got there first
            raise
    return True
