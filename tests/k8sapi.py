"""A Kubernetes API test server: kmock's emulator behind a fault-injecting proxy.

The portal's cluster layer is sync code (Django, Celery, the `kubernetes` client), while kmock
serves on an asyncio loop. `K8sApiServer` runs that loop in a background thread, so tests talk
to it over real HTTP with the real client, exactly as production talks to a cluster.

Layout, all on the one background loop::

    kubernetes client ──► FaultProxy (url) ──► PortalEmulator (direct_url)

Why a proxy instead of kmock reactions for faults: the emulator applies creates, patches and
deletes to its store *before* it looks at reactions, so a reaction answering 500 or 429 would
still have changed the object — a real API server that answers 429 changed nothing. The proxy
decides before the request reaches the store; it can also hang (to trip the client timeout)
and drop the TCP connection, which a reaction cannot express.

What the emulator adds to kmock 0.8 (a real API server does all of these): `metadata.uid`,
`generation` (bumped when anything outside metadata/status changes), `resourceVersion` and
`creationTimestamp`. Gaps that stay, and that tests must not rely on: apply/patch on a missing
object answers 404 (runtime.k8s falls back to create), label selectors are ignored on list
(runtime.k8s filters client-side), patches are JSON merges (lists replaced, no managed-field
tracking, so a field dropped from the applied manifest is *kept*), no validation or defaulting
(CRD-schema tests cover that), and the proxy does not stream watches (use `direct_url`).

Objects are addressed by `runtime.k8s.Kind`; direct helpers (`put`, `get_object`, `patch_object`,
`delete_object`) act on the store without going through HTTP or the fault proxy, the way a
controller's write would appear — use them to seed state and to simulate operators.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import json
import random
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import aiohttp.web
import kmock
import pytest

from runtime import k8s
from runtime.k8s import Kind

_T = TypeVar("_T")

# Faults the proxy can inject: an HTTP status, or one of these words.
HANG = "hang"  # hold the request until the client gives up (its timeout), never answer
DROP = "drop"  # close the TCP connection without an HTTP answer
TRANSIENT_FAULTS: tuple[int | str, ...] = (500, 429, HANG, DROP)


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_NAMESPACE_PATH = re.compile(r"/api/v1/namespaces(?:/([^/]+))?(/status)?")
_NAMESPACES = kmock.resource("v1/namespaces")
# The request being matched against the reactions, per asyncio task (see PortalEmulator).
_MATCHING: ContextVar[kmock.Request | None] = ContextVar("kmock_matching", default=None)


class PortalEmulator(kmock.KubernetesEmulator):
    """kmock's emulator plus the object metadata a real API server maintains.

    It also serves core Namespaces, which kmock 0.8 cannot: its path parser reads
    `/api/v1/namespaces/<name>` as "resource-less path inside namespace <name>" and fails
    outright on `/api/v1/namespaces`. Namespaces live in the same object store, under
    `v1/namespaces`, so `objects[...]` and the helpers below treat them like any other kind.
    """

    _resource_versions: Iterator[int] = itertools.count(1)

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
        token = _MATCHING.set(request)
        try:
            return await super()._handle(request)
        finally:
            _MATCHING.reset(token)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
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
                return _status_response(409, f'namespaces "{name}" already exists')
            self._objects[key] = {"apiVersion": "v1", "kind": "Namespace", **data}
            self._stamp(_NAMESPACES, None, name, created=True)
            return aiohttp.web.json_response(self._objects[key].raw, status=201)
        key = (_NAMESPACES, None, name)
        if name is None or key not in self._objects or self._objects[key].deleted:
            return _status_response(404, f'namespaces "{name}" not found')
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
        return _status_response(405, f"{method} is not supported on namespaces")

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


def _object_key(kind: Kind, namespace: str | None, name: str) -> tuple[Any, str | None, str]:
    """The emulator's store key; a parsed resource, because `in` does not parse strings."""
    return (kmock.resource(kind.key), namespace if kind.namespaced else None, name)


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
    elif not status_only and previous is not None:
        if _spec_part(previous.raw) != _spec_part(obj.raw):
            meta["generation"] = int(meta.get("generation") or 1) + 1
    meta["resourceVersion"] = str(resource_version)
    # Item assignment replaces the latest version in place (no extra history entry).
    obj["metadata"] = meta


@dataclass
class FaultPlan:
    """Which requests the proxy sabotages.

    `share` of requests (0..1) matching `when` get one of `faults`, chosen by a seeded RNG
    so a failing test replays the same sequence.
    """

    share: float = 0.0
    faults: tuple[int | str, ...] = TRANSIENT_FAULTS
    when: Callable[[str, str], bool] | None = None  # (method, path) -> bool
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def pick(self, method: str, path: str) -> int | str | None:
        if self.share <= 0 or (self.when is not None and not self.when(method, path)):
            return None
        if self.share < 1 and self.rng.random() >= self.share:
            return None
        return self.rng.choice(self.faults)


def _status_body(code: int, reason: str, message: str) -> dict[str, Any]:
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


def _status_response(code: int, message: str) -> aiohttp.web.Response:
    return aiohttp.web.json_response(_status_body(code, _REASONS.get(code, "Failure"), message), status=code)


_REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "AlreadyExists",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


class FaultProxy:
    """An aiohttp reverse proxy that forwards to `upstream` unless the plan says otherwise."""

    # Hung requests are released after this long at most, or when the proxy stops or resets.
    hang_seconds = 60.0

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.plan = FaultPlan()
        self.injected: Counter[int | str] = Counter()
        self.forwarded = 0
        self.seen: list[tuple[str, str]] = []  # (method, path) of every request, faulted or not
        self._release = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._runner: aiohttp.web.ServerRunner | None = None
        self.port = 0

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        server = aiohttp.web.Server(self._handle)
        self._runner = aiohttp.web.ServerRunner(server, shutdown_timeout=0.5)
        await self._runner.setup()
        site = aiohttp.web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def release_hangs(self) -> None:
        """Let hung requests finish (with a 504) — call on the loop thread."""
        self._release.set()
        self._release = asyncio.Event()

    async def _handle(self, request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        body = await request.read()
        self.seen.append((request.method, request.path))
        fault = self.plan.pick(request.method, request.path)
        if fault is not None:
            self.injected[fault] += 1
            return await self._inject(request, fault)
        self.forwarded += 1
        assert self._session is not None
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length", "transfer-encoding")
        }
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body or None, headers=headers
        ) as upstream:
            payload = await upstream.read()
            keep = {k: v for k, v in upstream.headers.items() if k.lower() in ("content-type", "retry-after")}
            return aiohttp.web.Response(status=upstream.status, body=payload, headers=keep)

    async def _inject(self, request: aiohttp.web.BaseRequest, fault: int | str) -> aiohttp.web.StreamResponse:
        if fault == HANG:
            release = self._release
            try:
                await asyncio.wait_for(release.wait(), self.hang_seconds)
            except TimeoutError:
                pass
            return aiohttp.web.json_response(_status_body(504, "Timeout", "hung"), status=504)
        if fault == DROP:
            # Abort resets the socket: the client sees the connection die mid-request.
            assert request.transport is not None
            request.transport.abort()
            # Nothing reaches the client; aiohttp drops this answer without logging an error.
            return aiohttp.web.Response(status=500)
        code = int(fault)
        headers = {"Retry-After": "1"} if code == 429 else None
        return aiohttp.web.json_response(
            _status_body(code, _REASONS.get(code, "Failure"), f"fault injected: {code}"),
            status=code,
            headers=headers,
        )


class K8sApiServer:
    """The emulator and its proxy on a private event loop in a daemon thread."""

    def __init__(self, kinds: tuple[Kind, ...] = k8s.KINDS) -> None:
        self.kinds = kinds
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="k8s-api-server", daemon=True)
        self.emulator: PortalEmulator
        self.proxy: FaultProxy
        self._kmock_server: kmock.Server
        self.startup_seconds = 0.0

    # lifecycle

    def start(self) -> K8sApiServer:
        started = time.perf_counter()
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            raise RuntimeError(f"the Kubernetes API test server did not start: {self._error!r}")
        self.startup_seconds = time.perf_counter() - started
        return self

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced to start() instead of dying silently
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        self.emulator = PortalEmulator()
        self._declare(self.emulator)
        async with self.emulator, kmock.Server(self.emulator) as server:
            self._kmock_server = server
            self.proxy = FaultProxy(str(server.url))
            await self.proxy.start()
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await self.proxy.stop()

    def _declare(self, emulator: PortalEmulator) -> None:
        for kind in self.kinds:
            emulator.resources[kind.key] = {"kind": kind.kind, "namespaced": kind.namespaced}

    # addresses and clients

    @property
    def url(self) -> str:
        """The API URL behind the fault proxy: what code under test should use."""
        return f"http://127.0.0.1:{self.proxy.port}"

    @property
    def direct_url(self) -> str:
        """The emulator itself, bypassing faults (and the only one that streams watches)."""
        return str(self._kmock_server.url).rstrip("/")

    def cluster(self, *, timeout: float = 2.0, direct: bool = False) -> k8s.Cluster:
        """A `runtime.k8s.Cluster` pointed at this server."""
        return k8s.Cluster.for_url(self.direct_url if direct else self.url, timeout=timeout)

    # running things on the server's loop

    def call(self, fn: Callable[[], _T]) -> _T:
        """Run `fn` on the server loop: the store is only ever touched from that thread."""

        async def wrapper() -> _T:
            return fn()

        return asyncio.run_coroutine_threadsafe(wrapper(), self._loop).result(10)

    # direct object access (no HTTP, no faults)

    def put(self, kind: Kind, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store `obj` as if it had been created; returns it with uid/generation set."""
        meta = obj.get("metadata") or {}
        body = {"apiVersion": kind.api_version, "kind": kind.kind, **copy.deepcopy(dict(obj))}
        key = _object_key(kind, meta.get("namespace"), meta["name"])

        def store() -> dict[str, Any]:
            self.emulator.objects[key] = body
            stored = self.emulator.objects[key]
            stamp_object(stored, created=True, resource_version=next(PortalEmulator._resource_versions))
            # A caller-chosen uid or generation wins (e.g. to pair a Workload with a job).
            chosen = {k: meta[k] for k in ("uid", "generation") if meta.get(k)}
            if chosen:
                stored["metadata"] = {**stored.raw["metadata"], **chosen}
            return copy.deepcopy(stored.raw)

        return self.call(store)

    def get_object(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The stored object (a copy), or None."""
        key = _object_key(kind, namespace, name)

        def read() -> dict[str, Any] | None:
            if key not in self.emulator.objects or self.emulator.objects[key].deleted:
                return None
            return copy.deepcopy(self.emulator.objects[key].raw)

        return self.call(read)

    def list_objects(self, kind: Kind, namespace: str | None = None) -> list[dict[str, Any]]:
        """All stored live objects of `kind` (in `namespace` when given)."""

        def read() -> list[dict[str, Any]]:
            found = []
            for (resource, ns, _name), obj in self.emulator.objects.items():
                if kmock.resource(kind.key) == resource and not obj.deleted:
                    if namespace is None or ns == namespace:
                        found.append(copy.deepcopy(obj.raw))
            return found

        return self.call(read)

    def patch_object(
        self,
        kind: Kind,
        name: str,
        namespace: str | None,
        changes: Mapping[str, Any],
        *,
        status_only: bool = False,
    ) -> dict[str, Any]:
        """Merge `changes` into the stored object, as a controller's patch would."""
        key = _object_key(kind, namespace, name)

        def patch() -> dict[str, Any]:
            if key not in self.emulator.objects or self.emulator.objects[key].deleted:
                raise KeyError(f"{kind.kind} {namespace}/{name} does not exist")
            obj = self.emulator.objects[key]
            obj.patch(copy.deepcopy(dict(changes)))
            stamp_object(
                obj,
                created=False,
                status_only=status_only,
                resource_version=next(PortalEmulator._resource_versions),
            )
            return copy.deepcopy(obj.raw)

        return self.call(patch)

    def delete_object(self, kind: Kind, name: str, namespace: str | None = None) -> bool:
        """Remove the object from the store; False if it was absent."""
        key = _object_key(kind, namespace, name)

        def delete() -> bool:
            if key not in self.emulator.objects or self.emulator.objects[key].deleted:
                return False
            self.emulator.objects[key].delete()
            return True

        return self.call(delete)

    # faults

    def inject_faults(
        self,
        share: float,
        faults: tuple[int | str, ...] = TRANSIENT_FAULTS,
        *,
        when: Callable[[str, str], bool] | None = None,
        seed: int = 0,
    ) -> None:
        """Make `share` of requests (optionally only those `when(method, path)`) fail."""
        plan = FaultPlan(share=share, faults=faults, when=when, seed=seed)
        self.call(lambda: setattr(self.proxy, "plan", plan))

    def fail_always(self, fault: int | str) -> None:
        """Answer every request with one fault (e.g. 403, 422, HANG)."""
        self.inject_faults(1.0, (fault,))

    def clear_faults(self) -> None:
        """Stop injecting and let hung requests finish."""

        def clear() -> None:
            self.proxy.plan = FaultPlan()
            self.proxy.release_hangs()

        self.call(clear)

    @property
    def injected(self) -> Counter[int | str]:
        """How many of each fault the proxy has injected."""
        return self.call(lambda: Counter(self.proxy.injected))

    def proxied_requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request the code under test sent (through the proxy)."""
        return self.call(lambda: list(self.proxy.seen))

    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request the emulator served, oldest first."""
        return self.call(lambda: [(r.method, r.url.path) for r in self.emulator])


@pytest.fixture
def k8s_api() -> Iterator[K8sApiServer]:
    """A fresh Kubernetes API test server per test (starts in ~10 ms; see the module doc)."""
    server = K8sApiServer().start()
    try:
        yield server
    finally:
        server.stop()
