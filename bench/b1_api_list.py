"""B1 — API list cost: SQL queries per page of /api/v1/deployments, then p95 under load.

1. Queries per page (limit 100) with Django's test Client and token auth, at 10 and at 1,000
   deployments across 10 tenants, for a platform admin (sees every tenant) and a tenant member.
   Target: <= 8 queries and the same number at both sizes.
2. 32 concurrent clients (32 users, each with its own API token, spread over the 10 tenants)
   against `gunicorn portal.wsgi` started the way the Dockerfile starts it (3 sync workers) on a
   loopback port with a production-like environment. Rounds alternate /api/v1/me/ (trivial,
   authenticated) and /api/v1/deployments/ (a page of 100): p95(list) / p95(me), same run.
   Target: <= 3.

    .venv/bin/python bench/b1_api_list.py [--rounds 4] [--per-client 10]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, bench_env, header, on_exit, pct, row, seed_flavor, setup_django  # noqa: E402

from tests.support.processes import free_port, kill_group  # noqa: E402

TENANTS = 10
CLIENTS = 32


def seed_base():
    from django.contrib.auth.models import Group, User

    from portal.api import token_create
    from quotas.models import PLATFORM_ADMIN_GROUP, Membership, Tenant, TenantQuota

    flavor = seed_flavor()
    tenants = [Tenant.objects.create(slug=f"team-{i:02d}", display_name=f"Team {i}") for i in range(TENANTS)]
    for t in tenants:
        TenantQuota.objects.create(tenant=t, flavor=flavor, nominal_gpus=100_000)
    admin = User.objects.create_user("bench-admin", password="bench-password-123")
    admin.groups.add(Group.objects.get_or_create(name=PLATFORM_ADMIN_GROUP)[0])
    users = []
    for i in range(CLIENTS):
        user = User.objects.create_user(f"bench-user-{i:02d}", password="bench-password-123")
        Membership.objects.create(user=user, tenant=tenants[i % TENANTS], role="member")
        users.append(user)
    tokens = {u.username: token_create(user=u, name="bench")[1] for u in [admin, *users]}
    return flavor, tenants, admin, users, tokens


def add_deployments(flavor, tenants, users, count: int, start: int) -> None:
    """`count` more deployments, spread round-robin over the tenants, in mixed states, each with
    its revisions as the services leave them: revision 1 serving (proposed while nothing was
    approved), and every fifth approved one with a change waiting as revision 2."""
    from deployments.choices import State
    from deployments.models import ModelDeployment

    # A mix (not a set) of states, weighted like a busy platform: mostly serving.
    S = State
    states = [S.READY, S.READY, S.READY, S.QUEUED, S.PROVISIONING, S.PENDING_APPROVAL, S.STOPPED, S.DEGRADED]
    conditions = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "NonZeroServeEndpoints",
            "message": "Serving",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
        {
            "type": "Admitted",
            "status": "True",
            "reason": "Admitted",
            "message": "Admitted by ClusterQueue",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        },
    ]
    rows = []
    for k in range(start, start + count):
        tenant = tenants[k % TENANTS]
        rows.append(
            ModelDeployment(
                tenant=tenant,
                name=f"llm-{k:05d}",
                model_source="meta-llama/Meta-Llama-3-8B-Instruct",
                served_model_name=f"llama3-8b-{k}",
                flavor=flavor,
                backend="kuberay",
                max_replicas=2,
                max_model_len=8192,
                dtype="bfloat16",
                state=states[k % len(states)],
                generation=2,
                observed_generation=2,
                conditions=conditions,
                reserved_gpus=2,
                endpoint_url=f"http://llm-{k:05d}-serve-svc.{tenant.slug}.svc:8000/v1",
                metrics_url=f"http://llm-{k:05d}-head-svc.{tenant.slug}.svc:8080/metrics",
                created_by=users[k % CLIENTS],
                status_message="Serving.",
            )
        )
    ModelDeployment.objects.bulk_create(rows, batch_size=500)
    add_revisions(rows)


def add_revisions(deployments) -> None:
    """Revision 1 for each bulk-created deployment (serving once approved) and a proposed
    revision 2 beside every fifth serving one, as the revision services would have written them."""
    from deployments.choices import RevisionStatus
    from deployments.models import DeploymentRevision, ModelDeployment
    from deployments.services.common import spec_gpus, spec_of
    from deployments.states import REQUESTED

    revisions = []
    for k, dep in enumerate(deployments):
        spec = spec_of(dep)
        requested = dep.state in REQUESTED
        status = RevisionStatus.PROPOSED if requested else RevisionStatus.APPROVED
        revisions.append(DeploymentRevision(deployment=dep, number=1, spec=spec, gpus=spec_gpus(spec), status=status))
        if not requested and k % 5 == 0:
            change = spec | {"max_model_len": 16384}
            revisions.append(DeploymentRevision(deployment=dep, number=2, spec=change, gpus=spec_gpus(change)))
    DeploymentRevision.objects.bulk_create(revisions, batch_size=500)
    for rev in revisions:
        if rev.status == RevisionStatus.APPROVED:
            rev.deployment.serving_revision = rev
    serving = [dep for dep in deployments if dep.serving_revision is not None]
    ModelDeployment.objects.bulk_update(serving, ["serving_revision"], batch_size=500)


def count_queries(token: str) -> tuple[int, int, list[str]]:
    """(queries, items on the page, the SQL) for one GET of the first page."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    assert client.get("/api/v1/deployments/", **auth).status_code == 200  # warm (last_used write)
    with CaptureQueriesContext(connection) as ctx:
        response = client.get("/api/v1/deployments/", **auth)
    assert response.status_code == 200, response.content[:300]
    return len(ctx.captured_queries), len(response.json()["results"]), [q["sql"] for q in ctx.captured_queries]


def in_process_times(token: str) -> dict[str, tuple[float, float]]:
    """Service time without concurrency: (best, median) seconds per request, test Client."""
    from _common import best_of
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    return {
        key: best_of(lambda p=path: client.get(p, **auth), repeat=30)
        for key, path in (("me", "/api/v1/me/"), ("list", "/api/v1/deployments/"))
    }


# --- load -----------------------------------------------------------------------------------


def start_gunicorn(db_name: str, port: int, log_dir: Path) -> subprocess.Popen:
    env = {**os.environ, **bench_env(db_name), "PYTHONUNBUFFERED": "1"}
    log = open(log_dir / "gunicorn.log", "w")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "portal.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "3",
            "--timeout",
            "60",
            "--access-logfile",
            str(log_dir / "access.log"),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    on_exit(lambda: kill_group(proc))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited:\n{(log_dir / 'gunicorn.log').read_text()[-3000:]}")
        try:
            get(port, "/healthz", None)
            return proc
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("gunicorn did not start")


def get(port: int, path: str, token: str | None) -> tuple[int, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        headers = {"Host": "127.0.0.1", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Token {token}"
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        return response.status, len(body)
    finally:
        conn.close()


def phase(port: int, path: str, tokens: list[str], per_client: int) -> tuple[list[float], float, dict]:
    """All clients at once, `per_client` sequential requests each; latencies and wall time."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    barrier = threading.Barrier(len(tokens) + 1)

    def client(token: str):
        mine, codes = [], []
        barrier.wait()
        for _ in range(per_client):
            started = time.perf_counter()
            code, _ = get(port, path, token)
            mine.append(time.perf_counter() - started)
            codes.append(code)
        with lock:
            latencies.extend(mine)
            for c in codes:
                statuses[c] = statuses.get(c, 0) + 1

    threads = [threading.Thread(target=client, args=(t,)) for t in tokens]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return latencies, time.perf_counter() - started, statuses


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-client", type=int, default=10)
    parser.add_argument("--small", type=int, default=10, help="deployments in the first measurement")
    parser.add_argument("--large", type=int, default=1000, help="deployments in the second measurement")
    args = parser.parse_args()

    db_name = setup_django("b1")
    header("B1 API list cost (/api/v1/deployments, page of 100)")
    flavor, tenants, admin, users, tokens = seed_base()

    results = {}
    small, large = args.small, args.large
    add_deployments(flavor, tenants, users, small, 0)
    results[small] = {"admin": count_queries(tokens["bench-admin"]), "member": count_queries(tokens[users[0].username])}
    add_deployments(flavor, tenants, users, large - small, small)
    results[large] = {"admin": count_queries(tokens["bench-admin"]), "member": count_queries(tokens[users[0].username])}
    for who in ("admin", "member"):
        q10, n10, _ = results[small][who]
        q1000, n1000, _ = results[large][who]
        row(
            f"queries/page, {who}: N={small} ({n10} items) vs N={large} ({n1000} items)",
            f"{q10} vs {q1000}  (ratio {q1000 / q10:.2f})",
            target="<= 8, same",
        )
    serial = in_process_times(tokens[users[0].username])
    row(
        "single client, in-process: /me/ vs list, best / median ms",
        f"{serial['me'][0] * 1e3:.1f} / {serial['me'][1] * 1e3:.1f} vs "
        f"{serial['list'][0] * 1e3:.1f} / {serial['list'][1] * 1e3:.1f}  "
        f"(ratio of bests {serial['list'][0] / serial['me'][0]:.2f}x)",
    )
    if os.environ.get("BENCH_SHOW_SQL"):
        for sql in results[large]["admin"][2]:
            print("      ", sql[:200])

    from django.db import connections

    connections.close_all()
    with tempfile.TemporaryDirectory(prefix="bench-b1-") as tmp:
        port = free_port()
        start_gunicorn(db_name, port, Path(tmp))
        load_tokens = [tokens[u.username] for u in users]
        for path in ("/api/v1/me/", "/api/v1/deployments/"):  # warm every worker
            phase(port, path, load_tokens, 2)
        lat = {"me": [], "list": []}
        wall = {"me": 0.0, "list": 0.0}
        codes: dict[str, dict] = {"me": {}, "list": {}}
        for _ in range(args.rounds):
            for key, path in (("me", "/api/v1/me/"), ("list", "/api/v1/deployments/")):
                got, seconds, statuses = phase(port, path, load_tokens, args.per_client)
                lat[key] += got
                wall[key] += seconds
                for c, n in statuses.items():
                    codes[key][c] = codes[key].get(c, 0) + n
        status_code, size = get(port, "/api/v1/deployments/", load_tokens[0])
        body_items = None
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request(
            "GET", "/api/v1/deployments/", headers={"Host": "127.0.0.1", "Authorization": f"Token {load_tokens[0]}"}
        )
        body_items = len(json.loads(conn.getresponse().read())["results"])
        conn.close()

    print(
        f"   gunicorn: 3 sync workers, {CLIENTS} concurrent clients (one token each), "
        f"{args.rounds} rounds x {args.per_client} requests per client per endpoint"
    )
    for key in ("me", "list"):
        n = len(lat[key])
        row(
            f"{key}: p50 / p95 / p99 ms ({n} requests, {n / wall[key]:.0f} req/s, status {codes[key]})",
            f"{pct(lat[key], 50) * 1e3:.1f} / {pct(lat[key], 95) * 1e3:.1f} / {pct(lat[key], 99) * 1e3:.1f}",
        )
    print(f"   list page: {body_items} items, {size} bytes (status {status_code})")
    ratio = pct(lat["list"], 95) / pct(lat["me"], 95)
    row("p95(list page of 100) / p95(/me/)", f"{ratio:.2f}x", target="<= 3")
    row(
        "throughput(me) / throughput(list)", f"{(len(lat['me']) / wall['me']) / (len(lat['list']) / wall['list']):.2f}x"
    )


if __name__ == "__main__":
    main()
