"""kmock's emulator plus what a real API server maintains, and the API server's error answers.

What the emulator adds to kmock 0.8 (a real API server does all of these): `metadata.uid`,
`generation` (bumped when anything outside metadata/status changes), `resourceVersion` and
`creationTimestamp`; server-side apply creates a missing object (201) and removes the fields its
field manager applied before and no longer applies; label selectors filter LIST; creates answer
201; a missing object is 404 `NotFound` and a second create 409 `AlreadyExists`, with the API
server's messages (tests/support/k8s/semantics.py; tests/cluster/test_contract_api.py holds each
to the real kube-apiserver). Gaps that stay, and that tests must not rely on: lists are atomic
under apply (a CRD's `x-kubernetes-list-type: map` merge by key is not modelled), merge patches
other than apply keep no field ownership, objects may be created in a namespace that does not
exist (the real server answers 404), the status subresource takes any field (the real one
ignores all but `status`), no validation or defaulting (CRD-schema tests cover that), and the
proxy does not stream watches (use `direct_url`).

Test adapter: Kueue's visibility API (`GET /apis/visibility.kueue.x-k8s.io/v1beta{1,2}/
clusterqueues/<cq>/pendingworkloads` and `.../namespaces/<ns>/localqueues/<lq>/pendingworkloads`)
is an aggregated API served by the Kueue controller, which kmock cannot know. The emulator
answers it with a stand-in computed from the Workloads and LocalQueues in its store (see
`PortalEmulator._serve_pending_workloads` for what it models and what it does not).
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import aiohttp
import aiohttp.web
import attrs
import kmock
from kmock._internal.k8s import KubernetesNotFoundError, KubernetesObjectConflictError

from runtime.k8s import Kind
from tests.support.k8s import semantics
from tests.support.k8s.operating import ACCESS_REVIEW_PATH, LOG_PATH, OperatingAdapters


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_NAMESPACE_PATH = re.compile(r"/api/v1/namespaces(?:/([^/]+))?(/status)?")
_NAMESPACES = kmock.resource("v1/namespaces")
_VISIBILITY_PATH = re.compile(
    r"/apis/visibility\.kueue\.x-k8s\.io/(?P<version>v1beta1|v1beta2)/"
    r"(?:clusterqueues/(?P<cq>[^/]+)|namespaces/(?P<ns>[^/]+)/localqueues/(?P<lq>[^/]+))/pendingworkloads"
)
_WORKLOADS = kmock.resource("kueue.x-k8s.io/v1beta2/workloads")
_LOCALQUEUES = kmock.resource("kueue.x-k8s.io/v1beta2/localqueues")
_CLUSTERQUEUES = kmock.resource("kueue.x-k8s.io/v1beta2/clusterqueues")
# The request being matched against the reactions, per asyncio task (see PortalEmulator).
_MATCHING: ContextVar[kmock.Request | None] = ContextVar("kmock_matching", default=None)


class PortalEmulator(OperatingAdapters, kmock.KubernetesEmulator):
    """kmock's emulator plus the object metadata a real API server maintains.

    It also serves core Namespaces, which kmock 0.8 cannot: its path parser reads
    `/api/v1/namespaces/<name>` as "resource-less path inside namespace <name>" and fails
    outright on `/api/v1/namespaces`. Namespaces live in the same object store, under
    `v1/namespaces`, so `objects[...]` and the helpers below treat them like any other kind.
    """

    _resource_versions: Iterator[int] = itertools.count(1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._init_operating()
        # Server-side apply: per object key and field manager, the paths it applied last.
        self.applied: dict[tuple[Any, str | None, str | None], dict[str, set[semantics.Path]]] = {}

    def __iter__(self) -> Iterator[kmock.Request]:
        # kmock decides whether a reaction applies with `request in reaction_view`, which walks
        # the whole request history through the view's filters: each request cost grew with
        # every request served before it (B2 convergence fell from ~7/s to <1/s over 2,000
        # requests, 90 % of the server's CPU in that walk; bench/README.md). While a request is
        # being matched, the history it walks is that request alone — the same answer for
        # filter views, which is all this module uses (no slice views such as `[:3]`, whose
        # answer depends on earlier requests). Iterating from outside a handler (tests'
        # `for r in emulator`) still sees every request.
        current = _MATCHING.get()
        if current is not None:
            yield current
            return
        yield from super().__iter__()

    def _KubernetesEmulator__get_objs(self, request: kmock.Request, strict: bool) -> list[Any]:
        # kmock finds the object of a GET/PATCH/DELETE by testing every stored key, a cost that
        # grows with the store (a GET at 2,000 objects: 3.6 ms with the scan, 2.6 ms without).
        # A strict lookup by name is exactly one key, so it is a dict lookup here (resource
        # keys hash by group/version/plural, as they compare). Lists still scan.
        if strict and request.name is not None and request.resource is not None:
            key = (request.resource, request.namespace, request.name)
            return [self._objects[key]] if key in self._objects else []
        return super()._KubernetesEmulator__get_objs(request, strict)  # type: ignore[misc]

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        created = False
        if request.resource is not None:
            request, created = self._server_side_apply(request)
        token = _MATCHING.set(request)
        try:
            response = await super()._handle(request)
        except (KubernetesNotFoundError, KubernetesObjectConflictError) as error:
            response = aiohttp.web.json_response({}, status=error.status)
        finally:
            _MATCHING.reset(token)
        forgets = (request.action == kmock.action.CREATE and not created) or (
            request.action == kmock.action.DELETE and request.name is not None
        )
        if request.resource is not None and forgets and response.status < 300:
            meta = _meta(request.data) if request.action == kmock.action.CREATE else {}
            key = (request.resource, request.namespace or meta.get("namespace"), request.name or meta.get("name"))
            self.applied.pop(key, None)  # a new object: no field is owned by an apply yet
        return self._api_server_answer(request, response, created)

    def _server_side_apply(self, request: kmock.Request) -> tuple[kmock.Request, bool]:
        """Apply (`application/apply-patch+yaml`): create when missing, else merge and drop
        the fields this manager applied last time and not now (see semantics.py)."""
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        if request.action != kmock.action.UPDATE or content_type != "application/apply-patch+yaml":
            return request, False
        if request.subresource or not isinstance(request.data, Mapping) or request.name is None:
            return request, False
        manager = request.params.get("fieldManager") or ""
        key = (request.resource, request.namespace, request.name)
        new_paths = semantics.applied_paths(request.data)
        if key not in self._objects or self._objects[key].deleted:
            body = copy.deepcopy(dict(request.data))
            body.setdefault("metadata", {}).setdefault("name", request.name)
            if request.namespace:
                body["metadata"].setdefault("namespace", request.namespace)
            self.applied[key] = {manager: new_paths}
            return attrs.evolve(request, action=kmock.action.CREATE, data=body), True
        owned = self.applied.setdefault(key, {})
        dropped = owned.get(manager, set()) - new_paths
        owned[manager] = new_paths
        removal = semantics.removal_patch(self._objects[key].raw, dropped)
        if not removal:
            return request, False
        return attrs.evolve(request, data=semantics.merge(removal, request.data)), False

    def _api_server_answer(
        self, request: kmock.Request, response: aiohttp.web.StreamResponse, created: bool
    ) -> aiohttp.web.StreamResponse:
        """kmock's answers as the API server words them: 201 on create, `NotFound` and
        `AlreadyExists` Status objects (k8s.io/apimachinery/pkg/api/errors)."""
        if request.resource is None or not isinstance(response, aiohttp.web.Response):
            return response
        if response.status == 200 and (created or request.action == kmock.action.CREATE):
            response.set_status(201)
            return response
        name = request.name or _meta(request.data).get("name")
        what = semantics.qualified(request.resource)
        if response.status == 404:
            known = any(resource == request.resource for resource in self._get_resources())
            message = (
                f'{what} "{name}" not found' if known and name else "the server could not find the requested resource"
            )
            return status_response(404, message)
        if response.status == 409 and request.action == kmock.action.CREATE:
            return status_response(409, f'{what} "{name}" already exists')
        return response

    async def _serve_list(self, request: kmock.Request) -> Any:
        answer = await super()._serve_list(request)
        selector = request.params.get("labelSelector")
        if selector:
            try:
                matches = semantics.label_matcher(selector)
            except semantics.SelectorError as error:
                return status_response(400, str(error))
            answer = {**answer, "items": [item for item in answer["items"] if matches(item)]}
        return answer

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.path == "/apis/":  # the client's discovery call; kmock serves "/apis"
            raw_request = raw_request.clone(rel_url="/apis")
        log = LOG_PATH.fullmatch(raw_request.path)
        if log is not None and raw_request.method == "GET":
            return self._serve_pod_log(log["ns"], log["pod"], raw_request.query)
        if raw_request.path == ACCESS_REVIEW_PATH and raw_request.method == "POST":
            return self._serve_access_review(await raw_request.read())
        visibility = _VISIBILITY_PATH.fullmatch(raw_request.path)
        if visibility is not None and raw_request.method == "GET":
            return self._serve_pending_workloads(**visibility.groupdict())
        if raw_request.path.rstrip("/") == "/version" and raw_request.method == "GET":
            return self._serve_kube_version()
        if raw_request.method == "POST" and raw_request.query.get("dryRun") == "All":
            return self._serve_dry_run(raw_request.path, await raw_request.read())
        match = _NAMESPACE_PATH.fullmatch(raw_request.path)
        if match is None:
            return await super().__call__(raw_request)
        return self._serve_namespace(raw_request.method, match.group(1), bool(match.group(2)), await raw_request.read())

    def _serve_namespace(self, method: str, name: str | None, status_only: bool, body: bytes) -> aiohttp.web.Response:
        """CRUD for Namespaces with the API server's answers. Synchronous: atomic on the loop."""
        data = json.loads(body) if body else {}
        if name is None and method == "GET":
            items = [obj.raw for (res, _, _), obj in self._objects.items() if res == _NAMESPACES and not obj.deleted]
            return aiohttp.web.json_response(
                {"apiVersion": "v1", "kind": "NamespaceList", "metadata": {}, "items": items}
            )
        if name is None and method == "POST":
            name = _meta(data).get("name")
            key = (_NAMESPACES, None, name)
            if key in self._objects and not self._objects[key].deleted:
                return status_response(409, f'namespaces "{name}" already exists')
            self._objects[key] = {"apiVersion": "v1", "kind": "Namespace", **data}
            self._stamp(_NAMESPACES, None, name, created=True)
            return aiohttp.web.json_response(self._objects[key].raw, status=201)
        key = (_NAMESPACES, None, name)
        if name is None or key not in self._objects or self._objects[key].deleted:
            return status_response(404, f'namespaces "{name}" not found')
        obj = self._objects[key]
        if method == "GET":
            return aiohttp.web.json_response(obj.raw)
        if method == "PATCH":
            obj.patch(data)
            self._stamp(_NAMESPACES, None, name, created=False, status_only=status_only)
            return aiohttp.web.json_response(obj.raw)
        if method == "DELETE":
            last = obj.raw
            obj.delete()
            return aiohttp.web.json_response(last)
        return status_response(405, f"{method} is not supported on namespaces")

    def _serve_pending_workloads(
        self, cq: str | None, ns: str | None, lq: str | None, version: str = "v1beta1"
    ) -> aiohttp.web.Response:
        """Test adapter for Kueue's visibility API (`PendingWorkloadsSummary`, v1beta1 or v1beta2:
        the same items).

        A stand-in, not Kueue: it derives the queue from the Workloads in the store. A Workload
        is pending when it is neither QuotaReserved nor Admitted nor Finished; it belongs to
        the ClusterQueue its LocalQueue (`spec.queueName` in its namespace) points at. Order:
        higher `spec.priority` first, then creation order (creationTimestamp, and the store's
        resourceVersion for ties within a second) — Kueue's BestEffortFIFO/StrictFIFO order for
        workloads that were never evicted. Kueue's own order also weighs eviction time and
        fair sharing, which this does not model. Answers 404 for a queue that does not exist.
        """
        live = {key: obj.raw for key, obj in self._objects.items() if not obj.deleted}
        lq_to_cq = {
            (namespace, name): (raw.get("spec") or {}).get("clusterQueue")
            for (res, namespace, name), raw in live.items()
            if res == _LOCALQUEUES
        }
        if cq is not None and (_CLUSTERQUEUES, None, cq) not in live:
            return status_response(404, f'clusterqueues.visibility.kueue.x-k8s.io "{cq}" not found')
        if lq is not None:
            if (ns, lq) not in lq_to_cq:
                return status_response(404, f'localqueues.visibility.kueue.x-k8s.io "{lq}" not found')
            cq = lq_to_cq[ns, lq]
        pending = []
        for (res, namespace, _name), raw in live.items():
            if res != _WORKLOADS or _workload_admitted_or_done(raw):
                continue
            queue = (raw.get("spec") or {}).get("queueName")
            if lq_to_cq.get((namespace, queue)) == cq:
                pending.append(raw)
        meta = _meta
        pending.sort(
            key=lambda raw: (
                -int((raw.get("spec") or {}).get("priority") or 0),
                meta(raw).get("creationTimestamp") or "",
                int(meta(raw).get("resourceVersion") or 0),
            )
        )
        items, per_lq = [], {}
        for position, raw in enumerate(pending):
            queue_key = (meta(raw).get("namespace"), (raw.get("spec") or {}).get("queueName"))
            per_lq[queue_key] = per_lq.get(queue_key, -1) + 1
            item_meta = {
                k: meta(raw)[k] for k in ("name", "namespace", "creationTimestamp", "ownerReferences") if k in meta(raw)
            }
            items.append(
                {
                    "metadata": item_meta,
                    "priority": int((raw.get("spec") or {}).get("priority") or 0),
                    "localQueueName": queue_key[1],
                    "positionInClusterQueue": position,
                    "positionInLocalQueue": per_lq[queue_key],
                }
            )
        if lq is not None:
            items = [i for i in items if (i["metadata"].get("namespace"), i["localQueueName"]) == (ns, lq)]
        return aiohttp.web.json_response(
            {
                "apiVersion": f"visibility.kueue.x-k8s.io/{version}",
                "kind": "PendingWorkloadsSummary",
                "metadata": {"creationTimestamp": None},
                "items": items,
            }
        )

    async def _serve_create(self, request: kmock.Request) -> Any:
        # Runs after the emulator stored the object and before it renders the answer; no
        # await between here and the lookup, so the loop cannot interleave another write.
        self._stamp(
            request.resource,
            request.namespace or _meta(request.data).get("namespace"),
            request.name or _meta(request.data).get("name"),
            created=True,
        )
        return await super()._serve_create(request)

    async def _serve_update(self, request: kmock.Request) -> Any:
        self._stamp(
            request.resource,
            request.namespace,
            request.name,
            created=False,
            status_only=request.subresource == "status",
        )
        return await super()._serve_update(request)

    def _stamp(
        self,
        resource: Any,
        namespace: str | None,
        name: str | None,
        *,
        created: bool,
        status_only: bool = False,
    ) -> None:
        key = (resource, namespace, name)
        if name is None or key not in self._objects or self._objects[key].deleted:
            return
        stamp_object(
            self._objects[key],
            created=created,
            status_only=status_only,
            resource_version=next(self._resource_versions),
        )


def object_key(kind: Kind, namespace: str | None, name: str) -> tuple[Any, str | None, str]:
    """The emulator's store key; a parsed resource, because `in` does not parse strings."""
    return (kmock.resource(kind.key), namespace if kind.namespaced else None, name)


def _workload_admitted_or_done(workload: Mapping[str, Any]) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("QuotaReserved", "Admitted", "Finished") and c.get("status") == "True" for c in conditions
    )


def _meta(data: Any) -> dict[str, Any]:
    return (data or {}).get("metadata") or {} if isinstance(data, Mapping) else {}


def _spec_part(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """Everything that counts towards `generation`: all but metadata and status."""
    return {k: v for k, v in (obj or {}).items() if k not in ("metadata", "status")}


def stamp_object(obj: kmock.Object, *, created: bool, status_only: bool = False, resource_version: int) -> None:
    """Set uid/generation/resourceVersion/creationTimestamp as the API server would."""
    meta = copy.deepcopy(obj.raw.get("metadata") or {})
    history = [version for version in obj.history]
    previous = history[-2] if len(history) >= 2 else None
    if created or not meta.get("uid"):
        meta["uid"] = str(uuid.uuid4())
        meta["generation"] = 1
        meta["creationTimestamp"] = _now()
    elif previous is not None and previous.raw == obj.raw:
        return  # a write that changes nothing (e.g. the same apply again) keeps resourceVersion
    elif not status_only and previous is not None:
        if _spec_part(previous.raw) != _spec_part(obj.raw):
            meta["generation"] = int(meta.get("generation") or 1) + 1
    meta["resourceVersion"] = str(resource_version)
    # Item assignment replaces the latest version in place (no extra history entry).
    obj["metadata"] = meta


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """A `Status` object as the API server answers errors, so the client can parse it."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def status_response(code: int, message: str) -> aiohttp.web.Response:
    return aiohttp.web.json_response(status_body(code, REASONS.get(code, "Failure"), message), status=code)


REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "AlreadyExists",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}
