"""The emulator and its proxy on a background loop, and the `k8s_api` fixture.

The portal's cluster layer is sync code (Django, Celery, the `kubernetes` client), while kmock
serves on an asyncio loop. `K8sApiServer` runs that loop in a background thread, so tests talk
to it over real HTTP with the real client, exactly as production talks to a cluster.

Objects are addressed by `runtime.k8s.Kind`; direct helpers (`put`, `get_object`, `patch_object`,
`delete_object`) act on the store without going through HTTP or the fault proxy, the way a
controller's write would appear — use them to seed state and to simulate operators.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import kmock
import pytest

from runtime import k8s
from runtime.k8s import Kind
from tests.support.k8s.emulator import PortalEmulator, object_key, stamp_object
from tests.support.k8s.faults import TRANSIENT_FAULTS, FaultPlan, FaultProxy

_T = TypeVar("_T")


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
        key = object_key(kind, meta.get("namespace"), meta["name"])

        def store() -> dict[str, Any]:
            self.emulator.objects[key] = body
            self.emulator.applied.pop(key, None)  # created by another writer: no apply owns a field
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
        key = object_key(kind, namespace, name)

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
        key = object_key(kind, namespace, name)

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
        key = object_key(kind, namespace, name)

        def delete() -> bool:
            if key not in self.emulator.objects or self.emulator.objects[key].deleted:
                return False
            self.emulator.objects[key].delete()
            return True

        return self.call(delete)

    # operating visibility: logs, permissions, discovery

    def set_pod_log(self, namespace: str, pod: str, container: str, text: str) -> None:
        """What `GET .../pods/<pod>/log?container=<container>` answers (the pod must exist)."""
        self.call(lambda: self.emulator.pod_logs.__setitem__((namespace, pod, container), text))

    def deny(self, verb: str, group: str, resource: str) -> None:
        """Make SelfSubjectAccessReviews for (verb, group, resource[/sub]) answer not allowed."""
        self.call(lambda: self.emulator.denied.add((verb, group, resource)))

    def undeclare(self, kind: Kind) -> None:
        """Stop serving `kind` (its CRD is missing): discovery no longer lists it."""
        self.call(lambda: self.emulator.resources.pop(kind.key, None))

    def declare(self, key: str, kind_name: str, *, namespaced: bool = True) -> None:
        """Serve a resource `group/version/plural` (e.g. a CRD at another version)."""
        self.call(lambda: self.emulator.resources.__setitem__(key, {"kind": kind_name, "namespaced": namespaced}))

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
