"""Shared plumbing for the benchmarks: a throw-away PostgreSQL database, Django set-up, timing.

Every benchmark runs against its own database (`bench_portal_<name>`, created with createdb and
dropped on exit, also on Ctrl-C) and, where it needs a broker, its own Redis database (checked
empty before use, flushed on exit). Nothing here touches the development or test databases.

Environment: BENCH_PG (default postgres://postgres@127.0.0.1:5432), BENCH_REDIS (default
redis://127.0.0.1:6379/11).
"""

from __future__ import annotations

import atexit
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
FIXTURES = SHARED / "fixtures" / "metrics"
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432").rstrip("/")
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/11")

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_cleanups: list = []


def _pg_args() -> list[str]:
    parts = urlsplit(PG)
    args = ["-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432)]
    if parts.username:
        args += ["-U", parts.username]
    return args


def _run_cleanups() -> None:
    while _cleanups:
        fn = _cleanups.pop()
        try:
            fn()
        except Exception as exc:  # keep cleaning up the rest
            print(f"cleanup {getattr(fn, '__name__', fn)} failed: {exc!r}", file=sys.stderr)


def on_exit(fn) -> None:
    """Run `fn` at exit (last registered first), also on SIGTERM / SIGINT."""
    _cleanups.append(fn)


atexit.register(_run_cleanups)


def _signalled(signum, _frame):
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _signalled)


def bench_env(db_name: str, **extra: str) -> dict[str, str]:
    """A production-like environment for the portal pointed at the benchmark database."""
    env = {
        "DATABASE_URL": f"{PG}/{db_name}",
        "SECRET_KEY": "bench-secret-key-not-for-production-0123456789abcdef",
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "HTTPS": "false",
        "LOG_LEVEL": "WARNING",
        "CELERY_BROKER_URL": REDIS,
        "DB_CONN_MAX_AGE": "60",
    }
    env.update(extra)
    return env


def setup_django(name: str, *, migrate: bool = True, **extra_env: str) -> str:
    """Create `bench_portal_<name>` (dropping a leftover), point Django at it, migrate.
    Returns the database name; the database is dropped at exit."""
    db_name = f"bench_portal_{name}"
    subprocess.run(["dropdb", *_pg_args(), "--if-exists", "--force", db_name], check=True)
    subprocess.run(["createdb", *_pg_args(), db_name], check=True)

    def drop_database():
        from django.db import connections

        connections.close_all()
        subprocess.run(["dropdb", *_pg_args(), "--if-exists", "--force", db_name], check=True)

    on_exit(drop_database)
    os.environ.update(bench_env(db_name, **extra_env))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
    return db_name


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by `pids` (those still alive), from /proc."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def group_pids(pgid: int) -> list[int]:
    """The processes of one process group (e.g. a Celery worker and its pool), from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def rss_kib(pid: int | None) -> tuple[int, int]:
    """(VmRSS, VmHWM: its peak) of a process in KiB, from /proc; (0, 0) when it is gone."""
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            fields[name] = value.split()[0] if value.split() else "0"
    except OSError:
        return 0, 0
    return int(fields.get("VmRSS", 0)), int(fields.get("VmHWM", 0))


def claim_redis() -> None:
    """Make sure the benchmark's Redis database is ours (empty), and flush it at exit."""
    import redis

    client = redis.Redis.from_url(REDIS)
    if client.dbsize():
        raise SystemExit(f"{REDIS} is not empty: set BENCH_REDIS to an unused Redis database")
    on_exit(lambda: client.flushdb())


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), nearest-rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def best_of(fn, *, repeat: int = 5, number: int = 1) -> tuple[float, float]:
    """(min, median) seconds per call of `fn` over `repeat` rounds of `number` calls."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - started) / number)
    return min(times), statistics.median(times)


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def header(title: str) -> None:
    print(f"== {title}")
    print(f"   machine: {machine()}")


def row(label: str, value, unit: str = "", target: str = "") -> None:
    tail = f"   (target {target})" if target else ""
    print(f"   {label:<58} {value}{(' ' + unit) if unit else ''}{tail}")


# --- portal data ---------------------------------------------------------------------------------

NAMESPACES = 10


def seed_flavor():
    from decimal import Decimal

    from quotas.models import GpuFlavor

    return GpuFlavor.objects.create(
        name="h100-sxm5",
        gpu_model="H100 SXM5",
        accelerator_type="H100",
        gpu_memory_gib=80,
        gpus_per_node=8,
        cpu_per_gpu=12,
        memory_gib_per_gpu=120,
        price_per_gpu_hour=Decimal("3.90"),
        node_labels={"node.kubernetes.io/instance-type": "p5.48xlarge"},  # GPU pods are pinned to these
    )


def seed_tenants(prefix: str, flavor, *, count: int = NAMESPACES):
    """`count` (NAMESPACES) tenants with ample quota, one member each; returns (tenants, members)."""
    from django.contrib.auth.models import User

    from quotas.models import Membership, Tenant, TenantQuota

    tenants, members = [], []
    for i in range(count):
        tenant = Tenant.objects.create(slug=f"{prefix}-{i:02d}", display_name=f"{prefix} {i}")
        TenantQuota.objects.create(tenant=tenant, flavor=flavor, nominal_gpus=100_000)
        user = User.objects.create_user(f"{prefix}-member-{i:02d}", password="bench-password-123")
        Membership.objects.create(user=user, tenant=tenant, role="member")
        tenants.append(tenant)
        members.append(user)
    return tenants, members


def create_deployments(tenants, members, flavor, count: int, prefix: str) -> list[int]:
    """`count` pending Llama-3-8B requests spread round-robin over the tenants, through the services."""
    from deployments import services

    ids = []
    for k in range(count):
        i = k % len(tenants)
        data = {
            "name": f"{prefix}-{k:04d}",
            "model_source": "meta-llama/Meta-Llama-3-8B-Instruct",
            "served_model_name": f"{prefix}-{k:04d}",  # unique per tenant (the tenant endpoint routes by it)
            "flavor": flavor,
            "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1,
            "min_replicas": 1,
            "max_replicas": 1,
            "target_ongoing_requests": 16,
            "max_model_len": 8192,
            "gpu_memory_utilization": 0.9,
            "enable_chunked_prefill": True,
            "quantization": "",
            "dtype": "bfloat16",
            "backend": "kuberay",
        }
        ids.append(services.deployment_create(tenant=tenants[i], user=members[i], data=data).pk)
    return ids


def forget_tenants(tenants) -> None:
    """Remove `tenants` and everything the portal holds for them from the database (no cluster
    calls), so a later phase's sweep sees neither their deployments nor their namespaces."""
    from deployments.models import ModelDeployment
    from quotas.models import QuotaReservation, Tenant

    ids = [t.pk for t in tenants]
    QuotaReservation.objects.filter(quota__tenant_id__in=ids).delete()
    ModelDeployment.objects.filter(tenant_id__in=ids).delete()
    Tenant.objects.filter(pk__in=ids).delete()
