"""B3 — Metrics collection: one scrape cycle over 1,000 endpoints, and parse cost per exposition.

1. Parse cost, in-process, per real exposition from ../shared/fixtures/metrics (read in place):
   `parse_exposition(text)` vs prometheus_client's `text_string_to_metric_families(text)` alone
   (every family and sample consumed) on the same text. Target: <= 1.2x. For the Ray expositions
   the ratio inverted is the gain of filtering before parsing.
2. One `runtime.exposition.scrape_many` call (its defaults: 32 threads, 5 s timeout) over 1,000
   loopback endpoints, served by 2 threaded HTTP server processes (distinct URL paths, the
   exposition bytes held in memory). Mixes: the Ray metrics port (what a KubeRay pod and the
   local Ray engine export), vLLM /metrics, and all four round-robin. This is the scraping and
   parsing alone, in one process.
3. The whole cycle as production runs it, side by side: 1,000 ready deployments in a
   PostgreSQL database of the benchmark's own, their metrics_url on those servers; (a) one
   `collect_all()` in this process, (b) `scrape_metrics_task` through a real `celery worker`
   (concurrency 2, Redis), which cuts the cycle into shards of METRICS_SHARD_SIZE (100) so both
   worker processes parse. Timed from the task's enqueue until every deployment's scrape state
   shows this cycle. Each is timed on its second cycle (the first has no previous snapshot, so
   no rates are derived). Target: <= 10 s on 2 cores. `--no-worker` skips 3.

    .venv/bin/python bench/b3_metrics.py [--endpoints 1000] [--mix ray,vllm,all] [--no-worker]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    FIXTURES,
    ROOT,
    best_of,
    claim_redis,
    cpu_seconds,
    create_deployments,
    header,
    on_exit,
    row,
    seed_flavor,
    seed_tenants,
    setup_django,
)

RAY = ["ray-serve-llm-vllm-0.32-cpu.prom", "ray-serve-llm-vllm-0.32-cpu-under-load.prom"]
VLLM = ["vllm-0.32-cpu-openai-server-under-load.prom", "vllm-0.32-cpu-openai-server-after-load.prom"]
MIXES = {"ray": RAY, "vllm": VLLM, "all": RAY + VLLM}
SERVERS = 2


def serve(port: int) -> None:
    """Child process: GET /<mix>/<i>/metrics answers fixture i % len(mix)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    bodies = {name: (FIXTURES / name).read_bytes() for name in RAY + VLLM}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            try:
                _, mix, index, _ = self.path.split("/", 3)
                names = MIXES[mix]
                body = bodies[names[int(index) % len(names)]]
            except (ValueError, KeyError):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 256
        daemon_threads = True

    with Server(("127.0.0.1", port), Handler) as httpd:
        print("ready", flush=True)
        httpd.serve_forever()


def start_servers() -> list[tuple[subprocess.Popen, int]]:
    from tests.support.processes import free_port

    servers = []
    for _ in range(SERVERS):
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

        def stop(proc=proc):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)

        on_exit(stop)
        assert proc.stdout.readline().strip() == "ready"
        servers.append((proc, port))
    return servers


def consume_prometheus(text: str) -> int:
    from prometheus_client.parser import text_string_to_metric_families

    n = 0
    for family in text_string_to_metric_families(text):
        n += len(family.samples)
    return n


def parse_costs() -> None:
    from runtime.exposition.parse import filter_exposition, parse_exposition

    print("   parse cost per exposition (best of 7; ms)")
    for name in VLLM + RAY:
        text = (FIXTURES / name).read_text()
        ours, _ = best_of(lambda t=text: parse_exposition(t, 0.0), repeat=7)
        theirs, _ = best_of(lambda t=text: consume_prometheus(t), repeat=7)
        filtering, _ = best_of(lambda t=text: filter_exposition(t), repeat=7)
        kept = filter_exposition(text)
        row(
            f"{name} ({len(text) // 1024} KiB, {text.count(chr(10))} lines -> {kept.count(chr(10))} kept)",
            f"parse_exposition {ours * 1e3:.1f} vs text_string_to_metric_families {theirs * 1e3:.1f}"
            f" (filter alone {filtering * 1e3:.1f}): {ours / theirs:.2f}x",
            target="<= 1.2x",
        )
        if name in RAY:
            row("   filtered-vs-unfiltered gain (unfiltered parse / parse_exposition)", f"{theirs / ours:.1f}x")


def scrape_cycle(servers, mix: str, endpoints: int) -> None:
    from runtime.exposition.snapshot import Snapshot
    from runtime.exposition.sources import scrape_many

    targets = {i: f"http://127.0.0.1:{servers[i % SERVERS][1]}/{mix}/{i}/metrics" for i in range(endpoints)}
    size = sum((FIXTURES / MIXES[mix][i % len(MIXES[mix])]).stat().st_size for i in range(endpoints))
    server_pids = [p.pid for p, _ in servers]
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    server_before = cpu_seconds(server_pids)
    started = time.perf_counter()
    results = scrape_many(targets)
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    scraper_cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    server_cpu = cpu_seconds(server_pids) - server_before
    ok = sum(isinstance(r, Snapshot) for r in results.values())
    errors = [str(r) for r in results.values() if not isinstance(r, Snapshot)]
    row(
        f"scrape_many, {endpoints} endpoints, mix '{mix}' ({size / 2**20:.0f} MiB)",
        f"{wall:.2f} s, {ok} ok, {len(errors)} errors, {endpoints / wall:.0f} endpoints/s",
        target="<= 10 s",
    )
    row("   CPU: scraper / servers", f"{scraper_cpu:.1f} s / {server_cpu:.1f} s")
    if errors:
        print("      first error:", errors[0])


def seed_serving(count: int) -> list[int]:
    """`count` deployments in state ready (no cluster: their state is set, not reconciled)."""
    from deployments.models import ModelDeployment

    flavor = seed_flavor()
    tenants, members = seed_tenants("b3", flavor)
    ids = create_deployments(tenants, members, flavor, count, "m")
    # Backend "local": one metrics URL per deployment. A KubeRay deployment's endpoints are its
    # pods, found with one pod LIST per namespace per shard (tests/metrics/test_collect.py);
    # the scrape, parse and store measured here are the same for both.
    ModelDeployment.objects.filter(pk__in=ids).update(state="ready", backend="local")
    return ids


def point_at(servers, ids: list[int], mix: str) -> None:
    from deployments.models import ModelDeployment
    from metrics.models import ScrapeState

    ScrapeState.objects.all().delete()
    rows = ModelDeployment.objects.filter(pk__in=ids).order_by("pk")
    for i, dep in enumerate(rows):
        dep.metrics_url = f"http://127.0.0.1:{servers[i % SERVERS][1]}/{mix}/{i}/metrics"
    ModelDeployment.objects.bulk_update(rows, ["metrics_url"], batch_size=500)


def timed_cycle(ids: list[int], run) -> tuple[float, int]:
    """Seconds from `run()` until every deployment's scrape state is from this cycle; samples stored."""
    from django.utils import timezone

    from metrics.models import MetricSample, ScrapeState

    samples_before = MetricSample.objects.count()
    since = timezone.now()
    started = time.perf_counter()
    run()
    while ScrapeState.objects.filter(last_attempt__gte=since).count() < len(ids):
        if time.perf_counter() - started > 300:
            raise SystemExit("a scrape cycle did not finish within 300 s")
        time.sleep(0.05)
    wall = time.perf_counter() - started
    failed = ScrapeState.objects.filter(last_attempt__gte=since).exclude(last_error="").count()
    if failed:
        print(
            f"      {failed} deployments failed:",
            ScrapeState.objects.exclude(last_error="").values_list("last_error", flat=True)[0],
        )
    return wall, MetricSample.objects.count() - samples_before


def whole_cycles(servers, mixes: list[str], endpoints: int) -> None:
    import tempfile

    from django.conf import settings

    from metrics.collect import collect_all
    from metrics.tasks import scrape_metrics_task
    from tests.support.processes import celery_worker

    ids = seed_serving(endpoints)
    print(f"   whole cycle: {endpoints} ready deployments, METRICS_SHARD_SIZE={settings.METRICS_SHARD_SIZE}")
    with tempfile.TemporaryDirectory(prefix="bench-b3-") as tmp:
        # A shard left waiting longer than one scrape interval expires unread (no pile-up in
        # production); here the whole cycle must be read to be timed, so the expiry is long.
        with celery_worker(
            Path(tmp) / "worker.log", concurrency=2, env={"LOG_LEVEL": "WARNING", "METRICS_SCRAPE_SECONDS": "600"}
        ):
            for mix in mixes:
                point_at(servers, ids, mix)
                timed_cycle(ids, collect_all)  # first cycle: snapshots only
                one, stored = timed_cycle(ids, collect_all)
                point_at(servers, ids, mix)
                timed_cycle(ids, scrape_metrics_task.delay)
                sharded, stored_w = timed_cycle(ids, scrape_metrics_task.delay)
                row(f"cycle, mix '{mix}': collect_all() in one process", f"{one:.2f} s, {stored} samples")
                row(
                    f"cycle, mix '{mix}': scrape_metrics_task, worker -c 2",
                    f"{sharded:.2f} s, {stored_w} samples; one process / sharded = {one / sharded:.2f}x",
                    target="<= 10 s",
                )


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--mix", default="ray,vllm,all")
    parser.add_argument("--no-worker", action="store_true", help="skip the whole-cycle comparison")
    args = parser.parse_args()
    if not FIXTURES.is_dir():
        raise SystemExit(f"{FIXTURES} is missing (the real expositions live in ../shared)")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    header("B3 metrics collection")
    parse_costs()
    servers = start_servers()
    scrape_cycle(servers, "vllm", 32)  # warm: imports, server threads
    for mix in args.mix.split(","):
        scrape_cycle(servers, mix, args.endpoints)
    if not args.no_worker:
        claim_redis()
        setup_django("b3")
        whole_cycles(servers, args.mix.split(","), args.endpoints)


if __name__ == "__main__":
    main()
