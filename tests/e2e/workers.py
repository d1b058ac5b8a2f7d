"""A real `celery worker` subprocess on Redis, sharing the test database with the test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import redis
from django.db import connection

from tests.shared import PROJECT_ROOT


def broker_url() -> str:
    """The test process's own broker (a Redis database of the tests' own, see pyproject)."""
    from django.conf import settings

    return settings.CELERY_BROKER_URL


def purge_broker() -> None:
    """Drop messages earlier tests left (requeues whose deployments rolled back)."""
    redis.Redis.from_url(broker_url()).flushdb()


@contextmanager
def celery_worker(tmp_path: Path, *, extra_env: dict[str, str] | None = None, concurrency: int = 2):
    """Start a worker against the test database; yields the Popen; stops it (and dumps its log on
    failure) afterwards."""
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "CELERY_BROKER_URL": broker_url(),
        "RECONCILE_REQUEUE_SECONDS": "0.5",
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
    }
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
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
            cwd=PROJECT_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while "ready." not in log.read_text() and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        proc.log_path = log  # type: ignore[attr-defined]
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(10)


def wait_for(predicate, *, timeout: float, interval: float = 0.25, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
