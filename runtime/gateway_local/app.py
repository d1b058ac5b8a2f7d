"""The local gateway's aiohttp server and client (see the package docstring).

One application, one runner, one TCPSite per port in the routing table; a request's port (its
socket's own address) says whether it came in on a tenant's port or a deployment's. Sites are
opened and closed as the table changes (`sync_sites`, every POLL_SECONDS), and the table itself
is re-read on any request that finds the file changed, so a revoked key is refused at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from runtime.gateway_local.activator import Activator, asleep
from runtime.gateway_local.routes import ROUTES_FILE, Grant, Limits, Route, Table, TableFile
from runtime.gateway_local.usage import USAGE_FILE, SseUsage, UsageLog, UsageRecord, from_json, with_usage

MAX_BODY_BYTES = 4 * 1024 * 1024
POLL_SECONDS = 0.5
# The OpenAI routes a tenant's port sends on by the body's `model`.
ROUTED = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/score"})
OPEN_PATHS = frozenset({"/health"})  # a deployment port's liveness check, as the engine has it
# What an answer carries back from the engine (the rest is hop-by-hop or the server's own).
PASSED_BACK = ("Content-Type", "Content-Encoding", "Cache-Control")
log = logging.getLogger("gateway")


def error(status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None) -> web.Response:
    """An error in OpenAI's shape, which the OpenAI clients parse and raise by status."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return web.json_response(body, status=status, headers=headers)


def bearer(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class Meter:
    """Per-minute counters for a consumer's use of a shared deployment, in fixed windows from the
    first request, as Kuadrant's Limitador keeps a limit's counter (`seconds: 60`): a request is
    counted when let through, its tokens when the answer reports them (a TokenRateLimitPolicy
    counts `usage.total_tokens` from the response too), so the request that crosses a token limit
    completes and the next one is refused until the window ends."""

    WINDOW = 60.0

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.windows: dict[tuple[str, int], list[float]] = {}  # (consumer, deployment) -> [start, requests, tokens]

    def _window(self, key: tuple[str, int]) -> list[float]:
        now = self.clock()
        window = self.windows.get(key)
        if window is None or now - window[0] >= self.WINDOW:
            window = self.windows[key] = [now, 0, 0]
        return window

    def admit(self, key: tuple[str, int], limits: Limits) -> tuple[str, int] | None:
        """None when the request may go (and it is counted); else (which limit, seconds to wait)."""
        window = self._window(key)
        wait = max(1, int(window[0] + self.WINDOW - self.clock() + 0.999))
        if limits.requests_per_minute is not None and window[1] >= limits.requests_per_minute:
            return "requests", wait
        if limits.tokens_per_minute is not None and window[2] >= limits.tokens_per_minute:
            return "tokens", wait
        window[1] += 1
        return None

    def spend(self, key: tuple[str, int], tokens: int) -> None:
        self._window(key)[2] += tokens


class Gateway:
    """The routing file's table served on its ports; usage appended to the usage log."""

    def __init__(self, directory: Path, *, max_body: int = MAX_BODY_BYTES):
        self.directory = Path(directory)
        self.table_file = TableFile(self.directory / ROUTES_FILE)
        self.usage = UsageLog(self.directory / USAGE_FILE)
        self.max_body = max_body
        self.app = web.Application(client_max_size=max_body)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        self.sites: dict[int, web.TCPSite] = {}
        self.session: aiohttp.ClientSession | None = None
        self.meter = Meter()
        self.activator = Activator(self.table_file, lambda: self.session)

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        await self.runner.setup()
        # No pool limit and no total timeout: a long generation is the engine's to bound; keep-alive
        # connections to each engine spare a TCP handshake per request.
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            auto_decompress=False,
        )
        await self.sync_sites()

    async def stop(self) -> None:
        await self.runner.cleanup()
        if self.session is not None:
            await self.session.close()

    async def sync_sites(self) -> None:
        """Listen on every port the table names and on no other. A port another process holds is
        logged and tried again on the next poll (the backend moves it on the gateway's next start)."""
        wanted = self.table_file.current().ports
        for port in [p for p in self.sites if p not in wanted]:
            await self.sites.pop(port).stop()
            log.info("closed port %s", port)
        for port, owner in wanted.items():
            if port not in self.sites:
                site = web.TCPSite(self.runner, "127.0.0.1", port, reuse_address=True)
                try:
                    await site.start()
                except OSError as failed:
                    log.warning("cannot listen on port %s for %s: %s", port, owner, failed)
                    continue
                self.sites[port] = site
                log.info("listening on port %s for %s %s", port, *owner)

    async def run(self, stop: asyncio.Event, poll: float = POLL_SECONDS) -> None:
        await self.start()
        try:
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), timeout=poll)
                except TimeoutError:
                    await self.sync_sites()
        finally:
            await self.stop()

    # --- requests -----------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        table = self.table_file.current()
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        kind, owner = table.ports.get(sockname[1] if sockname else 0, ("", ""))
        if kind == "deployment":
            route = table.routes[int(owner)]
            if request.path in OPEN_PATHS and request.method == "GET":
                return asleep(route) if route.asleep else await self.forward(request, route, None, await request.read())
            grant = table.grant(bearer(request))
            if grant is None or not grant.allows(route):
                return error(401, "Incorrect API key provided.", code="invalid_api_key")
            body = await self._body(request)
            if route.asleep and not isinstance(body, web.Response):
                woken = await self.activator.hold(request, route, bearer(request))
                if isinstance(woken, web.Response):
                    return woken
                route = woken
            return await self.forward(request, route, grant, body)
        if kind == "tenant":
            return await self.tenant(request, table, str(owner))
        return error(404, "Nothing is served on this port any more.", code="not_found")

    async def tenant(self, request: web.Request, table: Table, tenant: str) -> web.StreamResponse:
        grant = table.grant(bearer(request))
        if grant is None or grant.tenant != tenant:
            return error(401, "Incorrect API key provided.", code="invalid_api_key")
        if request.path == "/v1/models" and request.method == "GET":
            return web.json_response({"object": "list", "data": [model_card(r) for r in table.models(tenant, grant)]})
        if request.path not in ROUTED or request.method != "POST":
            return error(404, f"No route {request.method} {request.path} on a tenant endpoint.", code="not_found")
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        try:
            payload = json.loads(body)
        except ValueError as bad:
            return error(400, f"The request body is not JSON: {bad}")
        if not isinstance(payload, dict):
            return error(400, "The request body is not a JSON object.")
        route = table.route(tenant, payload.get("model"), grant)
        if route is None:
            message = f"The model `{str(payload.get('model'))[:200]}` does not exist or your key cannot use it."
            return error(404, message, code="model_not_found")
        limits = table.limits(tenant, route)
        if limits is not None:
            over = self.meter.admit((tenant, route.deployment_id), limits)
            if over is not None:
                self.record(route, grant, route.model, (0, 0), 429)
                return limited(*over)
        if route.asleep:
            woken = await self.activator.hold(request, route, bearer(request))
            if isinstance(woken, web.Response):
                return woken
            route = woken
        return await self.forward(request, route, grant, body, payload)

    async def _body(self, request: web.Request) -> bytes | web.Response:
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            return error(413, f"The request body is larger than {self.max_body} bytes.", code="request_too_large")

    async def forward(
        self,
        request: web.Request,
        route: Route,
        grant: Grant | None,
        body: bytes | web.Response,
        payload: Any = None,
    ) -> web.StreamResponse:
        """Send the request to the route's engine and its answer back: an SSE stream event by
        event, anything else whole; the usage it reports is logged."""
        if isinstance(body, web.Response):
            return body
        if payload is None and body[:1] == b"{":
            try:
                payload = json.loads(body)
            except ValueError:
                payload = None  # the engine answers a malformed body itself on a deployment's port
        keep_usage = True
        if isinstance(payload, dict) and payload.get("stream") is True:
            keep_usage = with_usage(payload)
            if not keep_usage:
                body = json.dumps(payload).encode()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        if route.upstream_key:
            headers["Authorization"] = f"Bearer {route.upstream_key}"
        assert self.session is not None
        model = payload.get("model") if isinstance(payload, dict) and isinstance(payload.get("model"), str) else ""
        usage, status = (0, 0), 502
        sse = SseUsage(keep_usage_event=keep_usage)
        try:
            async with self.session.request(
                request.method, route.upstream + request.path_qs, data=body or None, headers=headers
            ) as upstream:
                status = upstream.status
                back = {name: upstream.headers[name] for name in PASSED_BACK if name in upstream.headers}
                if upstream.headers.get("Content-Type", "").startswith("text/event-stream"):
                    return await self._stream(request, upstream, back, sse)
                data = await upstream.read()
                if back.get("Content-Type", "").startswith("application/json"):
                    usage = from_json(data)
                return web.Response(status=upstream.status, body=data, headers=back)
        except (aiohttp.ClientError, TimeoutError) as failed:
            log.warning("engine of deployment %s did not answer: %s", route.deployment_id, failed)
            return error(502, "The model's engine did not answer; it may be starting or stopped.", kind="server_error")
        finally:
            usage = sse.usage if sse.usage != (0, 0) else usage  # a stream's, however it ended
            if grant is not None:
                self.record(route, grant, model or route.model, usage, status)
                if grant.tenant != route.tenant:
                    self.meter.spend((grant.tenant, route.deployment_id), sum(usage))

    async def _stream(
        self, request: web.Request, upstream: aiohttp.ClientResponse, headers: dict[str, str], sse: SseUsage
    ) -> web.StreamResponse:
        """Pass the engine's events on as they complete; `sse` notes the usage event on the way.
        A client that goes away (the OpenAI clients close the connection on `data: [DONE]`, which
        can be before the last bytes are written) ends the forwarding, not the count: the usage
        event came before `[DONE]`, and a write to a closed connection is not the engine failing."""
        answer = web.StreamResponse(status=upstream.status, headers=headers)
        await answer.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                out = sse.feed(chunk)
                if out:
                    await answer.write(out)
            rest = sse.flush()
            if rest:
                await answer.write(rest)
            await answer.write_eof()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError) as gone:
            if not (request.transport is None or request.transport.is_closing()):
                raise  # the client is still there: the engine's side failed
            log.info("client left a stream of %s before its end: %s", request.path, gone)
        return answer

    def record(self, route: Route, grant: Grant, model: str, usage: tuple[int, int], status: int) -> None:
        try:
            self.usage.append(
                UsageRecord(
                    ts=round(time.time(), 3),
                    key_id=grant.key_id,
                    tenant=route.tenant,
                    deployment_id=route.deployment_id,
                    model=model,
                    prompt_tokens=usage[0],
                    completion_tokens=usage[1],
                    status=status,
                    consumer="" if grant.tenant == route.tenant else grant.tenant,
                )
            )
        except OSError as failed:  # a full disk must not fail the answer already sent
            log.error("cannot append to the usage log: %s", failed)


def limited(which: str, wait: int) -> web.Response:
    """A 429 in OpenAI's shape, with the seconds until the window ends (the OpenAI clients retry
    after Retry-After)."""
    answer = error(
        429,
        f"Your tenant's {which}-per-minute limit on this shared model is used up; try again in {wait} s.",
        kind="rate_limit_error",
        code="rate_limit_exceeded",
    )
    answer.headers["Retry-After"] = str(wait)
    return answer


def model_card(route: Route) -> dict[str, Any]:
    """One entry of /v1/models, in OpenAI's shape."""
    return {"id": route.model, "object": "model", "created": 0, "owned_by": route.tenant}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m runtime.gateway_local")
    parser.add_argument("directory", type=Path, help="routes.json is read here, usage.jsonl written")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await Gateway(args.directory).run(stop)

    try:  # vLLM's own server runs on uvloop too (uvicorn[standard]); it halves the loop's cost per event
        import uvloop
    except ImportError:
        asyncio.run(serve())
    else:
        uvloop.run(serve())
