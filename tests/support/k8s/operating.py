"""Test adapters for what an operator reads and kmock 0.8 does not serve: container logs,
SelfSubjectAccessReview, the server's version and dry-run creates. Mixed into `PortalEmulator`.

- `GET /api/v1/namespaces/<ns>/pods/<pod>/log?container=&tailLines=&limitBytes=` answers the text
  stored in `pod_logs[ns, pod, container]` as a real API server does: 404 for a pod that does not
  exist, 400 for a container the pod does not have (or none named when it has several), the last
  `tailLines` lines, then cut to `limitBytes` bytes.
- `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews` allows every request except the
  (verb, group, resource[/subresource]) triples in `denied` — the "missing permission" setups.
- `GET /version` answers `server_version` (default: the tested Kubernetes of runtime.versions).
- `POST <collection>?dryRun=All` stores nothing and answers the body as `admission[<group/version/
  plural>]` (a function body -> body, or raising `Refused(code, message)`) makes it: the stand-in
  for admission webhooks. Without an entry the body comes back as sent (no webhook configured).

Discovery (`/apis`, `/apis/<group>/<version>`) is kmock's own, built from the declared resources:
tests undeclare a kind to model a missing CRD, or declare it under another version.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import aiohttp.web

from runtime.versions import VERSIONS

LOG_PATH = re.compile(r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<pod>[^/]+)/log")
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


class Refused(Exception):
    """What an admission stand-in raises to answer an error, e.g. a webhook that does not answer:
    Refused(500, 'Internal error occurred: failed calling webhook ...')."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class OperatingAdapters:
    """Pod logs and access reviews; the store is only touched on the server's loop."""

    def _init_operating(self) -> None:
        self.pod_logs: dict[tuple[str, str, str], str] = {}
        self.denied: set[tuple[str, str, str]] = set()
        self.server_version = f"v{VERSIONS['kubernetes'].tested}"
        self.admission: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {}

    def _serve_kube_version(self) -> aiohttp.web.Response:
        major, minor = self.server_version.lstrip("v").split(".")[:2]
        return aiohttp.web.json_response({"major": major, "minor": minor, "gitVersion": self.server_version})

    def _serve_dry_run(self, path: str, body: bytes) -> aiohttp.web.Response:
        from tests.support.k8s.emulator import status_response

        parts = [p for p in path.split("/") if p]
        key = "/".join([*parts[1:3], parts[-1]]) if parts[0] == "apis" else "/".join([parts[1], parts[-1]])
        data = json.loads(body or b"{}")
        try:
            data = self.admission.get(key, lambda obj: obj)(data)
        except Refused as refusal:
            return status_response(refusal.code, refusal.message)
        return aiohttp.web.json_response(data, status=201)

    def _serve_pod_log(self, ns: str, pod: str, query: Any) -> aiohttp.web.Response:
        from tests.support.k8s.emulator import status_response

        stored = self._live_pod(ns, pod)
        if stored is None:
            return status_response(404, f'pods "{pod}" not found')
        containers = [c.get("name") for c in ((stored.get("spec") or {}).get("containers") or [])]
        container = query.get("container") or (containers[0] if len(containers) == 1 else None)
        if container is None or container not in containers:
            return status_response(400, f"container {container!r} is not valid for pod {pod}")
        text = self.pod_logs.get((ns, pod, container), "")
        if query.get("tailLines"):
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(query["tailLines"]) :]) if int(query["tailLines"]) else ""
        data = text.encode()
        if query.get("limitBytes"):
            data = data[: int(query["limitBytes"])]
        return aiohttp.web.Response(body=data, content_type="text/plain")

    def _serve_access_review(self, body: bytes) -> aiohttp.web.Response:
        review = json.loads(body or b"{}")
        attributes = (review.get("spec") or {}).get("resourceAttributes") or {}
        resource = attributes.get("resource", "")
        if attributes.get("subresource"):
            resource += "/" + attributes["subresource"]
        key = (attributes.get("verb", ""), attributes.get("group", ""), resource)
        allowed = key not in self.denied
        return aiohttp.web.json_response(
            {
                **review,
                "status": {
                    "allowed": allowed,
                    "reason": "" if allowed else f"test server: {key[0]} {key[2]} ({key[1] or 'core'}) denied",
                },
            },
            status=201,
        )

    def _live_pod(self, ns: str, pod: str) -> dict[str, Any] | None:
        import kmock

        key = (kmock.resource("v1/pods"), ns, pod)
        objects = self._objects  # type: ignore[attr-defined]
        if key not in objects or objects[key].deleted:
            return None
        return objects[key].raw
