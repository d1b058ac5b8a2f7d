"""Detached engine processes: start one in its own session, identify it for good, stop the
whole session, and read the end of its log."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import deque
from pathlib import Path

LOG_TAIL_LINES = 20


def boot_id() -> str:
    """This boot's id: a state file from an earlier boot describes processes that are gone."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _proc_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat fields after the command name (which may contain spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot; with the pid it identifies one process for good."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def process_alive(pid: int, start_time: int | None) -> bool:
    """The process `pid` that started at `start_time` still runs (zombies count as exited)."""
    fields = _proc_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start_time is None or int(fields[19]) == start_time


def session_members(sid: int) -> list[int]:
    """Every live process in session `sid` (the engine leader and all it spawned)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields and fields[0] not in ("Z", "X") and int(fields[3]) == sid:
                members.append(int(entry.name))
    return members


def spawn(argv: list[str], env: dict[str, str], log_path: Path, cwd: Path) -> subprocess.Popen:
    """Start `argv` detached: its own session, output appended to `log_path`, no stdin."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )


def terminate_session(pid: int, start_time: int | None, timeout: float) -> None:
    """SIGTERM the session `pid` leads, SIGKILL whatever is left after `timeout` seconds.

    A recycled pid (start time differs) is not ours: nothing is signalled. A dead leader's
    session is still swept, since children such as vLLM workers may outlive it.
    """
    leader_now = process_start_time(pid)
    if leader_now is not None and start_time is not None and leader_now != start_time:
        return
    for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        for member in session_members(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            _reap(pid)
            if not session_members(pid):
                return
            time.sleep(0.1)


def _reap(pid: int) -> int | None:
    """Collect our own exited child so it does not linger as a zombie; its exit code if reaped."""
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (started by an earlier worker) or already reaped
        return None
    return os.waitstatus_to_exitcode(status) if reaped else None


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log, for the failure message (the engine's error is usually there)."""
    try:
        with open(path, errors="replace") as log:
            return "".join(deque(log, maxlen=lines)).strip()
    except OSError:
        return ""
