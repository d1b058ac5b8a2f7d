"""The local engine's runtime directory for one test, and its teardown: no engine outlives the test.

Engines are started detached (their own session, `runtime.backends.local.processes.spawn`), so
they outlive the Celery worker a test starts and kills, and a failed test leaves them running:
on a 2-core machine the next test's engine then starts beside them and times out, and so on down
the slow suite. `local_runtime` hands each test its own LOCAL_RUNTIME_DIR and, at teardown, stops
every engine recorded there through the backend's own stop path (`LocalBackend.stop_all`: the
whole session, SIGTERM then SIGKILL), then fails the test if any process is still left.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.backends.local.backend import LocalBackend
from runtime.backends.local.ports import STATE_FILE
from runtime.backends.local.processes import session_members


def _recorded_sessions(root: Path) -> list[int]:
    """The session leader of every engine with a state file under `root`."""
    backend = LocalBackend(root)
    return [
        state.pid
        for path in sorted(root.glob(f"*/{STATE_FILE}"))
        if path.parent.name.isdigit() and (state := backend.load_state(int(path.parent.name))) is not None
    ]


def processes_under(root: Path) -> list[int]:
    """Live processes whose working directory lies under `root`: each engine runs in its run
    directory (`LocalBackend._start`), and what it spawns (vLLM's engine core, Ray's raylet and
    workers) inherits it; a deleted directory still shows, with " (deleted)" after its path."""
    prefix = str(root.resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if cwd == prefix or cwd.startswith(prefix + os.sep):
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if stat[stat.rindex(")") + 2] not in "ZX":  # a zombie is already gone
                    found.append(int(entry.name))
    return found


def stop_local_engines(root: Path) -> list[str]:
    """Stop every engine recorded under `root` the way the portal does, then SIGKILL anything
    still running there (so a failure here does not cascade into the next test); returns a line
    for each process that survived the backend's stop path (empty: none did)."""
    sessions = _recorded_sessions(root)
    LocalBackend(root).stop_all()
    survivors = sorted({*processes_under(root), *(pid for sid in sessions for pid in session_members(sid))})
    lines = []
    for pid in survivors:
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"{pid}: {cmdline[:200]}")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return lines


@pytest.fixture
def local_runtime(tmp_path, settings, monkeypatch) -> Iterator[Path]:
    """This test's LOCAL_RUNTIME_DIR (`tmp_path/runtime`), also this process's (the web side
    reads engine logs there); hand it to the worker as its LOCAL_RUNTIME_DIR. At teardown every
    engine under it is stopped, and the test fails if one was left running."""
    root = tmp_path / "runtime"
    settings.LOCAL_RUNTIME_DIR = root
    monkeypatch.setattr(LocalBackend, "_instance", None)
    yield root
    survivors = stop_local_engines(root)
    assert not survivors, "engine processes outlived LocalBackend.stop_all:\n" + "\n".join(survivors)
