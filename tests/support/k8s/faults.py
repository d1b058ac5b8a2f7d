"""The fault-injecting proxy in front of the emulator.

Why a proxy instead of kmock reactions for faults: the emulator applies creates, patches and
deletes to its store *before* it looks at reactions, so a reaction answering 500 or 429 would
still have changed the object — a real API server that answers 429 changed nothing. The proxy
decides before the request reaches the store; it can also hang (to trip the client timeout)
and drop the TCP connection, which a reaction cannot express.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import aiohttp.web

from tests.support.k8s.emulator import REASONS, status_body

# Faults the proxy can inject: an HTTP status, or one of these words.
HANG = "hang"  # hold the request until the client gives up (its timeout), never answer
DROP = "drop"  # close the TCP connection without an HTTP answer
TRANSIENT_FAULTS: tuple[int | str, ...] = (500, 429, HANG, DROP)


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
            return aiohttp.web.json_response(status_body(504, "Timeout", "hung"), status=504)
        if fault == DROP:
            # Abort resets the socket: the client sees the connection die mid-request.
            assert request.transport is not None
            request.transport.abort()
            # Nothing reaches the client; aiohttp drops this answer without logging an error.
            return aiohttp.web.Response(status=500)
        code = int(fault)
        headers = {"Retry-After": "1"} if code == 429 else None
        return aiohttp.web.json_response(
            status_body(code, REASONS.get(code, "Failure"), f"fault injected: {code}"),
            status=code,
            headers=headers,
        )
