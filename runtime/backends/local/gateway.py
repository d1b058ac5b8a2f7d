"""The local backend's side of the local gateway (runtime.gateway_local): its routing table, its
ports, and its one process.

The table is rebuilt whole from what is on disk (every engine's state file, every kept key, the
port assignments), so any worker can write it at any time and the result is the same: an engine
start or stop, a key mint or revocation, a reconcile. Keys become SHA-256 digests on the way in;
the gateway never holds a user's key.

Ports, kept in `ports-assigned.json` beside the engines': a deployment's public port under its
id (the key an engine's ports had before the gateway, so an endpoint URL users copied then keeps
working once the engine moves behind the gateway), its engine's under "engine-<id>", a tenant's
under "tenant-<slug>". The gateway, like an engine, is a detached session found again through
`gateway/process.json`; it starts with the first engine and outlives engine restarts.

Direct engine access: engines still listen on 127.0.0.1 only, and vLLM's checks one key, its
gateway upstream key (`upstream_key`, derived per deployment from the portal's secret, in the
0600 routing file and the engine's 0600 key file), so a local user who skips the gateway is
refused. The Ray engine has no `--middleware` and takes any caller on loopback, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from runtime.backends.local.engine import PROJECT_ROOT
from runtime.backends.local.keys import stored_keys
from runtime.backends.local.ports import PortAllocator
from runtime.backends.local.processes import (
    boot_id,
    process_alive,
    process_start_time,
    spawn,
    terminate_session,
)
from runtime.gateway_local import routes
from runtime.keys import MINTED_KEY_PREFIX, portal_key

GATEWAY_DIR = "gateway"
SHARES_FILE = "shares.json"  # the portal's active subscriptions, in routes.Table's `shares` shape
ASLEEP_DIR = "asleep"  # <id>.json per deployment the policy stopped and a request may wake
PROCESS_FILE = "process.json"
LOG_FILE = "gateway.log"
GATEWAY_MODULE = "runtime.gateway_local"
# Bumped when the gateway's code changes in a way a running one must be restarted for.
GATEWAY_VERSION = 2  # 2: wakes deployments asleep (issue 35)
TENANT_OWNER = "tenant-{}"
ENGINE_OWNER = "engine-{}"


def upstream_key(seed: str, deployment_id: int) -> str:
    """The one key deployment `deployment_id`'s engine accepts: the gateway's, from the portal's
    secret (its shape is the minted keys', so the log redactor finds it too)."""
    mac = hmac.new(seed.encode(), f"llm-portal gateway upstream {deployment_id}".encode(), hashlib.sha256)
    return MINTED_KEY_PREFIX + "gw" + mac.hexdigest()


def port_open(port: int, timeout: float = 0.5) -> bool:
    """Something accepts connections on 127.0.0.1:`port` now."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=timeout):
        return True
    return False


class LocalGateway:
    """The routing file, the gateway's ports and its process, for one LOCAL_RUNTIME_DIR."""

    def __init__(
        self,
        root: Path,
        *,
        seed: str = "",
        python: str | None = None,
        stop_timeout: float = 10.0,
        wake_url: str | None = None,
    ):
        self.root = Path(root)
        self.directory = self.root / GATEWAY_DIR
        self.seed = seed
        self.wake_url = wake_url
        self.python = python or sys.executable  # this interpreter: the one with aiohttp
        self.stop_timeout = stop_timeout
        self.ports = PortAllocator(self.root)
        self._children: dict[int, subprocess.Popen] = {}

    @contextlib.contextmanager
    def _locked(self):
        """One writer of the table or starter of the process at a time, across worker processes."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.directory / "gateway.lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # --- endpoints ----------------------------------------------------------------------------

    def deployment_port(self, deployment_id: int) -> int:
        return self.ports.keep(str(deployment_id))[0]

    def tenant_port(self, tenant_slug: str) -> int:
        return self.ports.keep(TENANT_OWNER.format(tenant_slug))[0]

    def deployment_endpoint(self, deployment_id: int) -> str:
        return f"http://127.0.0.1:{self.deployment_port(deployment_id)}/v1"

    def tenant_endpoint(self, tenant_slug: str) -> str:
        return f"http://127.0.0.1:{self.tenant_port(tenant_slug)}/v1"

    # --- the routing table --------------------------------------------------------------------

    def table(self, engines: Iterable[Any], upstream_of: Callable[[Any], str]) -> routes.Table:
        """The table for `engines` (EngineStates; `upstream_of` gives one's base URL) and every
        kept key. Each running deployment also takes the portal's Try-it key."""
        routed = {}
        for state in engines:
            if not state.tenant_slug:
                continue  # started before the gateway: its next reconcile restarts it behind one
            routed[state.deployment_id] = routes.Route(
                deployment_id=state.deployment_id,
                port=self.deployment_port(state.deployment_id),
                tenant=state.tenant_slug,
                model=state.model,
                upstream=upstream_of(state),
                upstream_key=upstream_key(self.seed, state.deployment_id) if self.seed else None,
            )
        keys = {
            routes.key_digest(key): routes.Grant(key_id=key_id, tenant=tenant, deployment_id=scope)
            for tenant, key_id, scope, key in stored_keys(self.root)
        }
        if self.seed:
            for route in routed.values():
                try_it = routes.key_digest(portal_key(self.seed, route.deployment_id))
                keys[try_it] = routes.Grant(key_id=None, tenant=route.tenant, deployment_id=route.deployment_id)
        for dep_id, (tenant, model) in self._asleep().items():
            if dep_id not in routed:  # an engine that runs wins over a stale marker
                port = self.deployment_port(dep_id)
                routed[dep_id] = routes.Route(dep_id, port, tenant, model, upstream="", asleep=True)
        shares = {
            consumer: {dep_id: limits for dep_id, limits in shared.items() if dep_id in routed}
            for consumer, shared in self._shares().items()
        }
        shares = {consumer: shared for consumer, shared in shares.items() if shared}
        tenants = {slug: self.tenant_port(slug) for slug in {r.tenant for r in routed.values()} | set(shares)}
        wake_url = self.wake_url if any(r.asleep for r in routed.values()) else None
        return routes.Table(tenants=tenants, routes=routed, keys=keys, shares=shares, wake_url=wake_url)

    # --- deployments asleep (deployments.wake) --------------------------------------------------

    def _asleep(self) -> dict[int, tuple[str, str]]:
        """Deployment id -> (tenant slug, served model) of every marker `sleep` left."""
        found = {}
        for path in sorted((self.directory / ASLEEP_DIR).glob("*.json")):
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                data = json.loads(path.read_text())
                if path.stem.isdigit() and isinstance(data["tenant"], str) and isinstance(data["model"], str):
                    found[int(path.stem)] = (data["tenant"], data["model"])
        return found

    def sleep(self, deployment_id: int, tenant: str, model: str) -> None:
        """Keep deployment `deployment_id`'s ports and name on the gateway while its engine is gone:
        a request to it asks the portal to wake it (only where a wake URL is set)."""
        folder = self.directory / ASLEEP_DIR
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = folder / f"{deployment_id}.json.tmp"
        tmp.write_text(json.dumps({"tenant": tenant, "model": model}))
        tmp.replace(folder / f"{deployment_id}.json")

    def awake(self, deployment_id: int) -> None:
        """Drop the marker: the engine starts, or the deployment is not to be woken any more."""
        with contextlib.suppress(FileNotFoundError):
            (self.directory / ASLEEP_DIR / f"{deployment_id}.json").unlink()

    def _shares(self) -> dict[str, dict[int, routes.Limits]]:
        """The shares the portal last wrote (`write_shares`); none when the file is missing or bad."""
        try:
            data = json.loads((self.directory / SHARES_FILE).read_text())
            return {
                str(consumer): {int(dep_id): routes.Limits(**limits) for dep_id, limits in shared.items()}
                for consumer, shared in data.items()
            }
        except (OSError, ValueError, TypeError, AttributeError):
            return {}

    def write_shares(self, shares: dict[str, dict[int, routes.Limits]]) -> bool:
        """Keep the portal's active subscriptions (consumer slug -> deployment id -> limits) for the
        next table; True when they changed. The caller rewrites the table (`write`)."""
        text = json.dumps(
            {c: {str(i): asdict(limits) for i, limits in sorted(s.items())} for c, s in sorted(shares.items())},
            indent=1,
        )
        with self._locked():
            path = self.directory / SHARES_FILE
            with contextlib.suppress(OSError):
                if path.read_text() == text:
                    return False
            tmp = path.with_name(SHARES_FILE + ".tmp")
            tmp.write_text(text)
            tmp.replace(path)
            return True

    def write(self, engines: Iterable[Any], upstream_of: Callable[[Any], str]) -> routes.Table:
        """Rebuild and write the routing file (under the lock: a writer that read older state
        files never writes after a newer one); the gateway reads it on its next request."""
        with self._locked():
            table = self.table(engines, upstream_of)
            routes.write(self.directory / routes.ROUTES_FILE, table)
            return table

    # --- the process --------------------------------------------------------------------------

    def _state(self) -> dict[str, Any] | None:
        try:
            state = json.loads((self.directory / PROCESS_FILE).read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def alive(self) -> bool:
        state = self._state()
        if state is None or state.get("boot_id") != boot_id():
            return False
        child = self._children.get(state.get("pid"))
        if child is not None and child.poll() is not None:
            return False
        return process_alive(state["pid"], state.get("start_time"))

    def ensure_running(self, rewrite: Callable[[], Any]) -> bool:
        """Start the gateway unless the current version runs; True when it was started. Before a
        start, each of its ports that another process took meanwhile moves (`PortAllocator.assign`)
        and `rewrite` writes the table again with the ports it will bind."""
        with self._locked():
            state = self._state()
            if self.alive() and state and state.get("version") == GATEWAY_VERSION:
                return False
            if state is not None:
                self._terminate(state)
            table = routes.TableFile(self.directory / routes.ROUTES_FILE).current()
            owners = [TENANT_OWNER.format(slug) for slug in table.tenants] + [str(i) for i in table.routes]
        moved = [owner for owner in owners if self.ports.assign(owner, 1)[1] is not None]
        if moved:
            rewrite()
        with self._locked():
            if self.alive():
                return False  # another worker started it meanwhile
            self._spawn()
            return True

    def _spawn(self) -> None:
        env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
        env.update({"PYTHONPATH": str(PROJECT_ROOT), "PYTHONUNBUFFERED": "1"})
        argv = [self.python, "-m", GATEWAY_MODULE, str(self.directory)]
        process = spawn(argv, env, self.directory / LOG_FILE, cwd=self.directory)
        self._children[process.pid] = process
        # Reap it the moment it exits, as the engines are (LocalBackend._start).
        threading.Thread(target=process.wait, name=f"gateway-{process.pid}-waiter", daemon=True).start()
        state = {
            "pid": process.pid,
            "start_time": process_start_time(process.pid),
            "boot_id": boot_id(),
            "version": GATEWAY_VERSION,
            "argv": argv,
        }
        tmp = self.directory / (PROCESS_FILE + ".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.directory / PROCESS_FILE)

    def stop(self) -> bool:
        """Stop the gateway (the demo's shutdown, a test's teardown); True when one was recorded."""
        with self._locked():
            state = self._state()
            if state is None:
                return False
            self._terminate(state)
            return True

    def _terminate(self, state: dict[str, Any]) -> None:
        if state.get("boot_id") == boot_id():
            terminate_session(state["pid"], state.get("start_time"), self.stop_timeout)
        child = self._children.pop(state.get("pid"), None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
        (self.directory / PROCESS_FILE).unlink(missing_ok=True)
