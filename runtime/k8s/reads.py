"""Reads for operating visibility: Events, container logs, the API's discovery documents, the
server's version, the visibility API's version, the portal's own permissions, and dry-run creates
(what the admission webhooks would make of an object, storing nothing). Mixed into `Cluster`;
every call goes through its `_call` (timeout, error kinds, call counter)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client as k8s_client

from runtime.k8s.errors import ClusterError, NotFound, _translated_errors
from runtime.k8s.kinds import VISIBILITY_GROUP, VISIBILITY_VERSIONS, Kind, visibility_version

VISIBILITY_TTL_SECONDS = 300.0  # how long the visibility API's version is remembered


class OperatingReads:
    """What an operator reads to see why a deployment is not ready, or a cluster not set up."""

    # Provided by `Cluster`: the client, its core API, the timeout, `_call`, `_custom` and `_count`.
    api_client: k8s_client.ApiClient
    core: k8s_client.CoreV1Api
    timeout: float
    _visibility: tuple[str, float] | None = None

    def events_for(self, namespace: str, names: Iterable[str]) -> list[dict[str, Any]]:
        """The namespace's Events whose involved object is one of `names`, oldest first.

        One list per call: a field selector names one object, and a deployment has several
        (its job, the Ray cluster, pods, the Workload), so they are matched here.
        """
        wanted = set(names)
        body = self._call("list", self.core.list_namespaced_event, namespace)
        found = [e for e in body.get("items") or [] if (e.get("involvedObject") or {}).get("name") in wanted]
        return sorted(found, key=lambda e: event_time(e) or "")

    def pod_log(self, namespace: str, pod: str, container: str, *, tail_lines: int, limit_bytes: int) -> str:
        """The last `tail_lines` lines of one container's log, at most `limit_bytes` bytes."""
        self._count("log")
        with _translated_errors():
            response = self.core.read_namespaced_pod_log(
                pod,
                namespace,
                container=container,
                tail_lines=tail_lines,
                limit_bytes=limit_bytes,
                _request_timeout=self.timeout,
                _preload_content=False,
            )
            data = response.data
        return (data or b"").decode("utf-8", "replace")

    def api_groups(self) -> dict[str, list[str]]:
        """Every API group the server serves, with its served versions (discovery: allowed to
        any authenticated client, so no RBAC grant is needed)."""
        body = self._call("discovery", k8s_client.ApisApi(self.api_client).get_api_versions)
        return {
            group["name"]: [v["version"] for v in group.get("versions") or []] for group in body.get("groups") or []
        }

    def api_resources(self, group: str, version: str) -> set[str]:
        """Resource names (plurals, and subresources as `plural/sub`) served at `group/version`;
        empty when that version is not served."""
        try:
            body = self._call(
                "discovery", k8s_client.CustomObjectsApi(self.api_client).get_api_resources, group, version
            )
        except NotFound:
            return set()
        return {r["name"] for r in body.get("resources") or []}

    def server_version(self) -> dict[str, Any]:
        """GET /version: `gitVersion` ("v1.36.2"), `major`, `minor`, … (open to every identity
        through system:public-info-viewer)."""
        return self._call("discovery", k8s_client.VersionApi(self.api_client).get_code)

    def visibility_version(self) -> str:
        """The version of Kueue's visibility API to read: the first of VISIBILITY_VERSIONS that
        discovery lists, else the oldest (the read then answers 404), remembered for
        VISIBILITY_TTL_SECONDS; the oldest, not remembered, when discovery fails."""
        cached = self._visibility
        if cached is not None and time.monotonic() - cached[1] < VISIBILITY_TTL_SECONDS:
            return cached[0]
        try:
            served = self.api_groups().get(VISIBILITY_GROUP)
        except ClusterError:
            return VISIBILITY_VERSIONS[-1]  # not remembered: the next call asks again
        found = visibility_version(served) or VISIBILITY_VERSIONS[-1]
        self._visibility = (found, time.monotonic())
        return found

    def dry_run_create(self, kind: Kind, body: Mapping[str, Any]) -> dict[str, Any]:
        """What the API server would store for `body` after every admission webhook (dryRun=All):
        nothing is stored and no controller sees it. Needs the create permission."""
        namespace = (body.get("metadata") or {}).get("namespace")
        return self._custom("dry_run", "create", kind, namespace, dict(body), dry_run="All")

    def can_i(
        self, verb: str, group: str, resource: str, *, namespace: str | None = None, name: str | None = None
    ) -> tuple[bool, str]:
        """(allowed, the authorizer's reason) for the portal's own identity, from a
        SelfSubjectAccessReview; `resource` may name a subresource as `plural/sub`. Pass `name`
        for a grant limited by resourceNames: RBAC allows it only for a request naming one."""
        plural, _, sub = resource.partition("/")
        attributes = {"verb": verb, "group": group, "resource": plural}
        if sub:
            attributes["subresource"] = sub
        if namespace:
            attributes["namespace"] = namespace
        if name:
            attributes["name"] = name
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        api = k8s_client.AuthorizationV1Api(self.api_client)
        body = self._call("access_review", api.create_self_subject_access_review, review)
        status = body.get("status") or {}
        return bool(status.get("allowed")), status.get("reason") or status.get("evaluationError") or ""


def event_time(event: dict[str, Any]) -> str | None:
    """When an Event last happened: lastTimestamp, else eventTime (events.k8s.io writers), else
    its creation."""
    meta = event.get("metadata") or {}
    return event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp")
