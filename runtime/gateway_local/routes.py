"""The local gateway's routing table: which ports it listens on, where each model goes, which keys
open which models. Written by the local backend, read by the gateway; one JSON file, 0600:

    {"tenants": {"<slug>": {"port": 8301}},
     "deployments": {"<id>": {"port": 8302, "tenant": "<slug>", "model": "<served name>",
                              "upstream": "http://127.0.0.1:8303", "upstream_key": "<key or null>"}},
     "keys": {"<sha256 hex of a key>": {"key_id": 12, "tenant": "<slug>", "deployment_id": null}},
     "shares": {"<consumer slug>": {"<id>": {"tokens_per_minute": 1000, "requests_per_minute": null}}},
     "wake_url": "http://127.0.0.1:8000/api/v1/gateway/wake/"}

A key entry with `deployment_id` null opens every deployment of its tenant; with an id, that one
only. A share puts another tenant's deployment on a consumer's tenant port, for the consumer's
tenant-wide keys, under the consumer's own limits (null: none); the consumer's own served name
wins where the two are the same. `key_id` null marks the portal's own Try-it key. `upstream_key`
is the one key the engine behind a route accepts (the gateway's own, derived per deployment by
the backend), so an engine reached directly on its loopback port refuses a caller that skipped
the gateway.

A route with `asleep` true is a deployment the idle policy or serving schedule stopped (no engine,
no upstream): its ports stay open and it is listed, and a request to it is held while the gateway
asks the portal to wake it (`wake_url` + the deployment id, with the client's key; null: this
gateway wakes nothing and answers 503).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

WAKE_PATH = "/api/v1/gateway/wake/"  # the portal's wake call (access.api), the deployment id appended
ROUTES_FILE = "routes.json"  # in the gateway's directory, `<LOCAL_RUNTIME_DIR>/gateway/`


@dataclass(frozen=True)
class Route:
    """One deployment behind the gateway."""

    deployment_id: int
    port: int
    tenant: str
    model: str
    upstream: str  # the engine's base URL, without /v1 ("" while asleep)
    upstream_key: str | None = None
    asleep: bool = False  # stopped by a policy a request may undo: the gateway wakes it


@dataclass(frozen=True)
class Grant:
    """What one key may reach: its tenant's deployments, or one of them."""

    key_id: int | None  # None: the portal's own Try-it key
    tenant: str
    deployment_id: int | None = None

    def allows(self, route: Route) -> bool:
        return route.tenant == self.tenant and self.deployment_id in (None, route.deployment_id)


@dataclass(frozen=True)
class Limits:
    """A consumer's limits on one shared deployment, per minute (None: no limit)."""

    tokens_per_minute: int | None = None
    requests_per_minute: int | None = None

    def __post_init__(self):
        for value in (self.tokens_per_minute, self.requests_per_minute):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError(f"a limit is a whole number of at least 0 or null, not {value!r}")


@dataclass(frozen=True)
class Table:
    tenants: dict[str, int] = field(default_factory=dict)  # slug -> port
    routes: dict[int, Route] = field(default_factory=dict)  # deployment id -> route
    keys: dict[bytes, Grant] = field(default_factory=dict)  # sha256 digest -> grant
    shares: dict[str, dict[int, Limits]] = field(default_factory=dict)  # consumer slug -> deployment id -> limits
    wake_url: str | None = None  # the portal's wake call, the deployment id appended (None: no waking)

    @cached_property
    def ports(self) -> dict[int, tuple[str, str | int]]:
        """Every port to listen on: ("tenant", slug) or ("deployment", id); computed once per table."""
        found: dict[int, tuple[str, str | int]] = {port: ("tenant", slug) for slug, port in self.tenants.items()}
        found.update({route.port: ("deployment", route.deployment_id) for route in self.routes.values()})
        return found

    def grant(self, token: str | None) -> Grant | None:
        """The grant of the key `token`, or None. Every digest is compared, in constant time, so
        how long a refusal takes says nothing about which keys exist."""
        if not token:
            return None
        presented = key_digest(token)
        found = None
        for known, grant in self.keys.items():
            if secrets.compare_digest(presented, known):
                found = grant
        return found

    def models(self, tenant: str, grant: Grant) -> list[Route]:
        """The routes `grant` may use on `tenant`'s port, by model name: the tenant's own, and for
        a tenant-wide key the deployments shared with the tenant whose names it does not serve."""
        if grant.tenant != tenant:
            return []
        own = [r for r in self.routes.values() if grant.allows(r)]
        if grant.deployment_id is None:
            names = {r.model for r in own}
            for dep_id in self.shares.get(tenant, {}):
                route = self.routes.get(dep_id)
                if route is not None and route.tenant != tenant and route.model not in names:
                    own.append(route)
        return sorted(own, key=lambda r: (r.model, r.deployment_id))

    def limits(self, tenant: str, route: Route) -> Limits | None:
        """The consumer `tenant`'s limits on `route` when it is another tenant's, shared with it."""
        return None if route.tenant == tenant else self.shares.get(tenant, {}).get(route.deployment_id, Limits())

    def route(self, tenant: str, model: object, grant: Grant) -> Route | None:
        """The route for `model` on `tenant`'s port if `grant` may use it (served names are unique
        per tenant; were two the same, the lower deployment id would win, always the same one)."""
        return next((r for r in self.models(tenant, grant) if r.model == model), None)


def key_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def dump(table: Table) -> str:
    return json.dumps(
        {
            "tenants": {slug: {"port": port} for slug, port in sorted(table.tenants.items())},
            "deployments": {
                str(dep_id): {k: v for k, v in asdict(route).items() if k != "deployment_id"}
                for dep_id, route in sorted(table.routes.items())
            },
            "keys": {digest.hex(): asdict(grant) for digest, grant in sorted(table.keys.items())},
            "shares": {
                slug: {str(dep_id): asdict(limits) for dep_id, limits in sorted(shared.items())}
                for slug, shared in sorted(table.shares.items())
            },
            "wake_url": table.wake_url,
        },
        indent=1,
    )


def parse(text: str | bytes) -> Table:
    """The table in a routing file's text; ValueError when it is not one."""
    try:
        data = json.loads(text)
        return Table(
            tenants={str(slug): int(entry["port"]) for slug, entry in data["tenants"].items()},
            routes={int(i): Route(deployment_id=int(i), **entry) for i, entry in data["deployments"].items()},
            keys={bytes.fromhex(digest): Grant(**grant) for digest, grant in data["keys"].items()},
            shares={
                str(slug): {int(i): Limits(**limits) for i, limits in shared.items()}
                for slug, shared in data.get("shares", {}).items()
            },
            wake_url=_url(data.get("wake_url")),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"not a routing table: {error}") from None


def _url(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError(f"wake_url is an http(s) URL or null, not {value!r}")
    return value


def write(path: Path, table: Table) -> bool:
    """Replace the routing file atomically (a reader never sees half of it), readable by this user
    only (it holds the engines' upstream keys), and only when it changed; True when written."""
    text = dump(table)
    with contextlib.suppress(OSError):
        if path.read_text() == text:
            return False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return True


class TableFile:
    """The routing file as the gateway reads it: `current()` stats the file (a few microseconds)
    and parses it again only when its identity, size or mtime changed. A missing or broken file
    keeps the last good table for routing, but no table read yet means nothing is served."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._seen: tuple[int, int, int] | None = None
        self.table = Table()

    def current(self) -> Table:
        try:
            stat = os.stat(self.path)
        except OSError:
            return self.table
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if seen != self._seen:
            try:
                self.table = parse(self.path.read_bytes())
            except (OSError, ValueError):
                return self.table  # half-written by another writer: the next request reads it
            self._seen = seen
        return self.table
