"""The local engine's API keys: what the cluster keeps in Secrets, kept here in 0600 files.

vLLM compares the bearer token itself (`--api-key`), so it needs the keys, not digests. The
access app writes each key once, when it is minted (the only moment the portal holds it), to
`<LOCAL_RUNTIME_DIR>/keys/<tenant>/<key id>.json`, and deletes the file on revocation or expiry;
a deployment's engine is started with its tenant's keys that are scoped to it or to the whole
tenant, plus the portal's own Try-it key, through a 0600 YAML file handed to `--config` (so no
key appears on a command line). The directory survives the engine's run directory (removed on
stop), as a Secret survives its pods. Only integers and validated slugs make up these paths.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

KEYS_DIR = "keys"
ENGINE_KEYS_FILE = "api-keys.yaml"  # in the engine's run directory; vLLM wants .yaml for --config
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
    """The `--config` file that gives vLLM its keys (`api-key` takes a list); returns its path."""
    path = Path(run_dir) / ENGINE_KEYS_FILE
    _write_private(path, "api-key:\n" + "".join(f"  - {json.dumps(key)}\n" for key in keys))
    return path
