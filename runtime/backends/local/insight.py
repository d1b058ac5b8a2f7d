"""The local engine's log tail and startup markers (the local backend has no Kubernetes Events).

Markers: `process_started` is the spawn time in the state file; `weights_loading` and
`engine_ready` are vLLM's own log lines (to the second, in this machine's local time); for the
Ray engine, `engine_ready` is the launcher's ready file (written when Serve reports RUNNING).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runtime.backends.insight import bounded
from runtime.phases import log_markers
from runtime.redaction import redact


def tail(path: Path, *, lines: int, max_bytes: int) -> tuple[str, bool]:
    """The last `lines` lines of a file, at most `max_bytes` bytes of them; and whether anything
    was left out. Reads only the end of the file, whatever its size."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = max(0, size - max_bytes - 4096)
            handle.seek(start)
            data = handle.read()
    except OSError:
        return "", False
    all_lines = data.splitlines(keepends=True)
    if start > 0 and all_lines:
        all_lines = all_lines[1:]  # the first line read is probably a partial one
    kept = all_lines[-lines:]
    text = b"".join(kept)
    cut = start > 0 or len(kept) < len(all_lines)
    if len(text) > max_bytes:
        text, cut = text[-max_bytes:], True
    return text.decode("utf-8", "replace"), cut


def engine_logs(
    log_path: Path, engine: str, *, lines: int | None, max_bytes: int | None, secrets=()
) -> list[dict[str, Any]]:
    lines, max_bytes = bounded(lines, max_bytes)
    text, cut = tail(log_path, lines=lines, max_bytes=max_bytes)
    return [
        {
            "pod": "local-engine",
            "container": engine,
            "phase": "",
            "text": redact(text, tuple(secrets)),
            "error": "",
            "truncated": cut,
        }
    ]


def engine_markers(log_path: Path, started_at: float, ready_file: Path | None) -> dict[str, datetime]:
    """Startup markers of one local engine run: the spawn time, then vLLM's log lines after it."""
    started = datetime.fromtimestamp(started_at, UTC)
    markers = {"process_started": started}
    text, _cut = tail(log_path, lines=5000, max_bytes=1024 * 1024)  # read every poll while starting
    # The log is appended across restarts: only lines after this run's banner count.
    banner = text.rfind("\n=== ")
    found = log_markers(text[banner + 1 :] if banner >= 0 else text, now=datetime.now(UTC), tz=None)
    for name, at in found.items():
        # The log's second resolution can put a line before the spawn it follows.
        markers[name] = max(at.astimezone(UTC), started)
    if ready_file is not None:
        try:
            markers["engine_ready"] = datetime.fromtimestamp(ready_file.stat().st_mtime, UTC)
        except OSError:
            pass
    return markers
