"""Shared helpers for the reliability tests: env knobs, token-authenticated HTTP clients for a
live server, invariant checks that read committed rows, and real subprocesses (a private
redis-server, the web server, a Celery worker, beat) sharing the test database.

Knobs (environment; defaults keep the default suite fast, RELIABILITY.md lists bigger runs):
REL_LOAD_REQUESTS, REL_LOAD_CLIENTS, REL_RACE_ROUNDS, REL_FAULT_DEPLOYMENTS, REL_FAULT_SHARE,
REL_SCHEMA_EXAMPLES, REL_REDIS_PORT.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import requests
from django.db import connection
from django.db.models import Sum

from tests.support.processes import wait_for


def knob(name: str, default: int | float) -> int | float:
    """An integer/float knob from the environment (bigger local runs), else `default`."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return type(default)(raw)


# --- HTTP clients with real API tokens ---------------------------------------------------------


class Api:
    """A `requests` client for one user, authenticated with a real API token.

    One `requests.Session` per thread (a Session is not thread-safe), all sending the same token.
    """

    def __init__(self, base_url: str, user) -> None:
        from portal.api import token_create

        self.base_url = base_url.rstrip("/")
        self.user = user
        _, self.secret = token_create(user=user, name=f"reliability-{user.username}")
        self._local = threading.local()

    @property
    def session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            session = requests.Session()
            session.headers["Authorization"] = f"Token {self.secret}"
            self._local.session = session
        return self._local.session

    def request(self, method: str, path: str, json=None, timeout: float = 60) -> requests.Response:
        return self.session.request(method, self.base_url + path, json=json, timeout=timeout)

    def get(self, path: str, **kw) -> requests.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, json=None, **kw) -> requests.Response:
        return self.request("POST", path, json=json if json is not None else {}, **kw)


def draft(name: str, *, tenant: str = "alpha", flavor: str = "h100-sxm5", max_replicas: int = 1, **overrides) -> dict:
    """A valid API draft that needs `max_replicas` GPUs (TP=PP=1)."""
    data = {
        "tenant": tenant,
        "name": name,
        "model_source": "meta-llama/Meta-Llama-3-8B-Instruct",
        "flavor": flavor,
        "min_replicas": 1,
        "max_replicas": max_replicas,
        "max_model_len": 8192,
        "dtype": "bfloat16",
        "backend": "kuberay",
    }
    data.update(overrides)
    return data


# --- invariants (read committed rows) ----------------------------------------------------------


def quota_violations() -> list[str]:
    """Every broken quota invariant, as readable lines (empty when all hold).

    One SQL statement, so PostgreSQL reads quota rows and reservations from one snapshot; two
    queries could see a reservation committed between them and report a false violation."""
    from django.db.models import OuterRef, Subquery
    from django.db.models.functions import Coalesce

    from quotas.models import QuotaReservation, TenantQuota

    active = (
        QuotaReservation.objects.filter(quota=OuterRef("pk"), released__isnull=True)
        .values("quota")
        .annotate(total=Sum("gpus"))
        .values("total")
    )
    problems = []
    rows = TenantQuota.objects.annotate(active=Coalesce(Subquery(active), 0)).values_list(
        "tenant__slug", "flavor__name", "reserved_gpus", "active", "nominal_gpus", "borrowing_limit_gpus"
    )
    for tenant, flavor, reserved, held, nominal, borrowing in rows:
        label = f"{tenant}/{flavor}"
        if reserved != held:
            problems.append(f"{label}: reserved_gpus={reserved} but active reservations sum to {held}")
        if reserved > nominal + borrowing:
            problems.append(f"{label}: reserved {reserved} > nominal {nominal} + borrowing {borrowing}")
    return problems


def deployment_pair_violations() -> list[str]:
    """Half-written deployments: a row without its Requested event, its revision 1 or its audit
    entry, or the reverse; a reservation held by a deployment whose state holds none, or whose
    serving revision is not an approved one."""
    from core.models import AuditEvent
    from deployments.choices import RevisionStatus
    from deployments.models import DeploymentEvent, DeploymentRevision, ModelDeployment
    from deployments.services.common import OWNER
    from deployments.states import HOLDS_GPUS
    from quotas.models import QuotaReservation

    problems = []
    deps = set(ModelDeployment.objects.values_list("pk", flat=True))
    requested = set(DeploymentEvent.objects.filter(reason="Requested").values_list("deployment_id", flat=True))
    problems += [f"deployment {pk} has no Requested event" for pk in deps - requested]
    audited = {
        int(pk) for pk in AuditEvent.objects.filter(action="deployment.request").values_list("object_id", flat=True)
    }
    problems += [f"audit entry for missing deployment {pk}" for pk in audited - deps]
    problems += [f"deployment {pk} has no request audit entry" for pk in deps - audited]
    held = set(
        QuotaReservation.objects.filter(owner_type=OWNER, released__isnull=True).values_list("owner_id", flat=True)
    )
    problems += [f"reservation for missing deployment {pk}" for pk in held - deps]
    first = set(DeploymentRevision.objects.filter(number=1).values_list("deployment_id", flat=True))
    problems += [f"deployment {pk} has no revision 1" for pk in deps - first]
    idle = ModelDeployment.objects.filter(pk__in=held).exclude(state__in=HOLDS_GPUS)
    problems += [f"deployment {pk} holds GPUs while {state}" for pk, state in idle.values_list("pk", "state")]
    wrong = ModelDeployment.objects.filter(serving_revision__isnull=False).exclude(
        serving_revision__status=RevisionStatus.APPROVED
    )
    problems += [f"deployment {pk} serves a revision that is not approved" for pk in wrong.values_list("pk", flat=True)]
    return problems


class InvariantWatcher:
    """Samples the quota invariant on its own database connection while a race runs."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.samples = 0
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.violations += quota_violations()
                self.samples += 1
                time.sleep(self.interval)
        finally:
            connection.close()

    def __enter__(self) -> InvariantWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)


def status_histogram(responses) -> Counter:
    return Counter(r.status_code if hasattr(r, "status_code") else type(r).__name__ for r in responses)


# --- a private Redis (the subprocess helpers are in tests/support/processes.py) ---------------


class RedisServer:
    """A private redis-server (never the machine's 6379): no persistence, so a restart loses
    every queued message — the worst case for "no approved request is lost"."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port, self.workdir = port, workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(self.ping, timeout=10, what=f"redis-server on {self.port}")

    def ping(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=0.5).ping())
        except redis.exceptions.ConnectionError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


@pytest.fixture
def private_redis(tmp_path):
    port = int(knob("REL_REDIS_PORT", 6390))
    if port == 6379:
        raise RuntimeError("never restart the machine's Redis: pick another REL_REDIS_PORT")
    server = RedisServer(port, tmp_path)
    if server.ping():
        pytest.skip(f"something already listens on {port}; set REL_REDIS_PORT")
    server.start()
    try:
        yield server
    finally:
        server.stop()
