"""The activator: how the local gateway answers a request to a deployment that is asleep.

A deployment the idle policy or serving schedule stopped keeps its ports and its name on the
gateway (routes.Route.asleep). A request to it is held: the gateway asks the portal to wake it
(`POST <wake_url><id>` with the client's own key, which the portal checks again: access.wake,
deployments.wake), then waits until the deployment's engine is on the table and answers its
health check, and forwards the request as any other. It waits as long as the client asks
(`X-Wake-Timeout`, seconds, at most MAX_WAKE_SECONDS), else the deployment's tenant's default,
which the portal's answer carries. When the portal refuses (no quota, budget stopped, schedule
closed, stopped by a person), when the wait runs out, or when the portal cannot be reached, the
answer is a 503 in OpenAI's error shape with `Retry-After` and the reason as its `code` (the
OpenAI clients retry a 503 after Retry-After on their own). A health check never wakes anything.

While it waits it asks the portal again every ASK_EVERY seconds, so a start that failed or a
deployment stopped meanwhile ends the wait at once instead of at the deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import aiohttp
from aiohttp import web

from runtime.gateway_local.routes import Route, TableFile

WAKE_HEADER = "X-Wake-Timeout"
MAX_WAKE_SECONDS = 900
ASK_EVERY = 5.0
POLL_SECONDS = 0.5
HEALTH_TIMEOUT = 2.0
PORTAL_TIMEOUT = 10.0
CODE_MAX = 40
MESSAGE_MAX = 500
log = logging.getLogger("gateway.activator")


def error(status: int, message: str, *, kind: str = "invalid_request_error", code: str | None = None) -> web.Response:
    """An error in OpenAI's shape (as app.error; here so the activator needs nothing of the app)."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return web.json_response(body, status=status, headers=headers)


def unavailable(code: str, message: str, retry_after: object) -> web.Response:
    """503 + Retry-After (whole seconds, at least 1) + the reason as the error's code."""
    seconds = retry_after if isinstance(retry_after, int) and not isinstance(retry_after, bool) else 60
    answer = error(503, message, kind="server_error", code=code)
    answer.headers["Retry-After"] = str(min(max(1, seconds), 7 * 24 * 3600))
    return answer


def asleep(route: Route) -> web.Response:
    return unavailable("deployment_asleep", f"The model `{route.model}` is stopped; a request to it wakes it.", 60)


def requested_timeout(request: web.Request) -> int | None | web.Response:
    """The client's wait in seconds, None without the header, or the 400 for a bad value."""
    raw = request.headers.get(WAKE_HEADER)
    if raw is None:
        return None
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4 and int(raw) <= MAX_WAKE_SECONDS):
        return error(400, f"{WAKE_HEADER} is a whole number of seconds from 0 to {MAX_WAKE_SECONDS}.")
    return int(raw)


class Activator:
    """Wakes and waits for deployments asleep; `session()` gives the gateway's client session."""

    def __init__(
        self,
        table_file: TableFile,
        session: Callable[[], aiohttp.ClientSession],
        *,
        clock: Callable[[], float] = time.monotonic,
        poll: float = POLL_SECONDS,
        ask_every: float = ASK_EVERY,
    ):
        self.table_file = table_file
        self.session = session
        self.clock = clock
        self.poll = poll
        self.ask_every = ask_every

    async def hold(self, request: web.Request, route: Route, token: str | None) -> Route | web.Response:
        """Wake `route`'s deployment and wait for its engine: the live route to forward to, or the
        answer to send instead."""
        wanted = requested_timeout(request)
        if isinstance(wanted, web.Response):
            return wanted
        table = self.table_file.current()
        if not table.wake_url:
            return unavailable(
                "deployment_stopped", f"The model `{route.model}` is stopped; start it in the portal.", 60
            )
        url = f"{table.wake_url}{route.deployment_id}"
        answer = await self.ask(url, route, token)
        if isinstance(answer, web.Response):
            return answer
        timeout = wanted if wanted is not None else _seconds(answer.get("timeout_seconds"))
        deadline = self.clock() + timeout
        next_ask = self.clock() + self.ask_every
        while True:
            live = self.table_file.current().routes.get(route.deployment_id)
            if live is not None and not live.asleep and live.upstream and await self.healthy(live):
                return live
            now = self.clock()
            if now >= deadline:
                state = str(answer.get("state", ""))[:CODE_MAX]
                return unavailable(
                    "wake_timeout",
                    f"The model `{route.model}` is waking (its deployment is {state or 'starting'}) and did not "
                    f"answer within {timeout} s; try again shortly or send a longer {WAKE_HEADER}.",
                    10,
                )
            if now >= next_ask:
                answer = await self.ask(url, route, token)
                if isinstance(answer, web.Response):
                    return answer
                next_ask = now + self.ask_every
            await asyncio.sleep(min(self.poll, max(0.0, deadline - now)))

    async def ask(self, url: str, route: Route, token: str | None) -> dict | web.Response:
        """The portal's answer to a wake: its JSON when it wakes or runs, else the answer to send."""
        try:
            async with self.session().post(
                url,
                headers={"Authorization": f"Bearer {token or ''}"},
                timeout=aiohttp.ClientTimeout(total=PORTAL_TIMEOUT),
            ) as portal:
                status = portal.status
                data = await portal.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as failed:
            log.warning("cannot ask the portal to wake deployment %s: %s", route.deployment_id, failed)
            return unavailable("activator_unavailable", "The portal that wakes stopped models cannot be reached.", 30)
        if not isinstance(data, dict):
            data = {}
        if status in (200, 202):
            return data
        if status == 401:
            return error(401, "Incorrect API key provided.", code="invalid_api_key")
        if status == 409:
            code = data.get("code") if isinstance(data.get("code"), str) else ""
            message = data.get("message") if isinstance(data.get("message"), str) else ""
            return unavailable(
                code[:CODE_MAX] or "wake_refused",
                f"The model `{route.model}` is stopped and was not woken: {message[:MESSAGE_MAX]}",
                data.get("retry_after"),
            )
        log.warning("the portal answered %s to a wake of deployment %s", status, route.deployment_id)
        return unavailable("wake_failed", f"The model `{route.model}` is stopped and could not be woken.", 30)

    async def healthy(self, route: Route) -> bool:
        headers = {"Authorization": f"Bearer {route.upstream_key}"} if route.upstream_key else {}
        try:
            async with self.session().get(
                route.upstream + "/health", headers=headers, timeout=aiohttp.ClientTimeout(total=HEALTH_TIMEOUT)
            ) as engine:
                return engine.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False


def _seconds(value: object) -> int:
    """The portal's default wait, bounded as the header is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return min(max(0, value), MAX_WAKE_SECONDS)
    return 0
