"""Real subprocesses for tests and bench/: free ports, waiting, process groups, portal processes.

Every process here starts in its own session (`start_new_session=True`), so `kill_group`
signals exactly the process group a test started (the Celery main process and its pool
children together) and never anything else on the machine.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from tests.support.shared import PROJECT_ROOT

_T = TypeVar("_T")


LOWEST_PORT = 20000
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (where outgoing connections take theirs)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port nothing listens on: bound, then closed, so connecting is refused until
    the process it is handed to binds it.

    Picked at random below the kernel's ephemeral range, never twice in one process. A port from
    `bind(0)` comes from that range, which every outgoing connection also draws its source port
    from, and the control plane binds the ports it is handed seconds later, part after part: in one
    CI run a client connection took KubeRay's health port in between ("bind: address already in
    use", tests/bench/test_smoke.py's real plane)."""
    high = _ephemeral_low() - 1
    if high > LOWEST_PORT + 1000:
        for _ in range(500):
            port = random.randint(LOWEST_PORT, high)
            if port in _handed_out:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(
    predicate: Callable[[], _T], *, timeout: float = 30.0, interval: float = 0.25, what: str = "condition"
) -> _T:
    """Poll `predicate` until it returns something truthy, and return that; fail the test after
    `timeout` seconds. An exception from `predicate` ends the wait at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Signal the process group this test started (never anything else), then reap it; SIGKILL
    if it is still there after 20 s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def database_env() -> dict[str, str]:
    """The environment that points a child process at the test database (or, under bench/, at
    the benchmark's database: whichever Django is connected to)."""
    from django.db import connection

    db = connection.settings_dict
    return {"DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}", "PYTHONUNBUFFERED": "1"}


@contextmanager
def portal_process(
    args: list[str], log: Path, *, env: dict[str, str], ready: str | None, timeout: float = 60
) -> Iterator[subprocess.Popen]:
    """Run `python -m <args>` in the project against the test database, its output in `log`;
    wait until `ready` appears in the log; stop its process group afterwards. On failure, print
    the log's notable lines and its tail."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=PROJECT_ROOT,
            env={**os.environ, **database_env(), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        if ready is not None:

            def started():
                if proc.poll() is not None:
                    raise RuntimeError(f"{args[0]} exited early:\n{log.read_text()[-3000:]}")
                return ready in log.read_text()

            wait_for(started, timeout=timeout, interval=0.2, what=f"{args[0]} to start")
        proc.log_path = log  # type: ignore[attr-defined]
        yield proc
    except BaseException:
        text = log.read_text()
        notable = [
            line
            for line in text.splitlines()
            if any(
                word in line for word in ("ERROR", "CRITICAL", "WARNING", "onnect", "raised", "succeeded", "received")
            )
        ]
        print(f"--- {' '.join(args[:3])}: notable lines ---\n" + "\n".join(notable[-60:]))
        print(f"--- {' '.join(args[:3])}: log tail ---\n{text[-3000:]}")
        raise
    finally:
        kill_group(proc, signal.SIGTERM)


def celery_worker(log: Path, *, env: dict[str, str] | None = None, concurrency: int = 2):
    """A real `celery worker` (prefork) against the test database, on the broker in `env`, else
    on the test process's own (settings.CELERY_BROKER_URL); reconciles requeue after 0.5 s."""
    from django.conf import settings

    return portal_process(
        [
            "celery",
            "-A",
            "portal",
            "worker",
            "--loglevel=INFO",
            f"--concurrency={concurrency}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        log,
        env={"CELERY_BROKER_URL": settings.CELERY_BROKER_URL, "RECONCILE_REQUEUE_SECONDS": "0.5", **(env or {})},
        ready="ready.",
    )


def web_server(log: Path, port: int, *, env: dict[str, str]):
    """The portal under gunicorn (threads), as in production."""
    return portal_process(
        ["gunicorn", "portal.wsgi", "-b", f"127.0.0.1:{port}", "--workers", "1", "--threads", "4", "--timeout", "60"],
        log,
        env=env,
        ready="Booting worker",
    )
