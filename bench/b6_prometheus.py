"""B6 — One metrics cycle through a real Prometheus vs the direct scrape, by fleet size.

For each fleet size N (default 10, 100, 1000): N ready deployments over 10 tenant namespaces
in a PostgreSQL database of the benchmark's own, each with a unique served model name; a
stand-in process serves N engines (the real saturated vLLM exposition from
../shared/fixtures/metrics, cut to the families the portal reads, model_name relabelled per
deployment, counters growing 5 % per scrape: tests/support/prometheus.py); Debian's
`prometheus` binary scrapes all N every 5 s. Then, side by side in one run:

* Prometheus: `collect()` with PROMETHEUS_URL set (rate window 30 s): queries sent per cycle
  (Prometheus's own request counter) and wall time;
* direct: `collect()` without it, every deployment's metrics_url on the same stand-in.

Each is timed on 5 cycles after a warm-up (the direct path needs a previous snapshot for rates);
medians are reported, and the crossover fleet size from a straight line through each path's
points. Only 127.0.0.1 is used.

    .venv/bin/python bench/b6_prometheus.py [--sizes 10,100,1000] [--cycles 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import (  # noqa: E402
    FIXTURES,
    ROOT,
    create_deployments,
    header,
    on_exit,
    row,
    seed_flavor,
    seed_tenants,
    setup_django,
)

from runtime.exposition.window import rate_window  # noqa: E402

EXPOSITION = "vllm-0.32-cpu-openai-server-under-load.prom"
SCRAPE_INTERVAL_S = 5.0
CYCLE_S = 15  # METRICS_SCRAPE_SECONDS
RATE_WINDOW_S = rate_window(CYCLE_S, SCRAPE_INTERVAL_S)  # the portal's rule: 20 s here


def serve(spec_file: str) -> None:
    """Child process: the stand-in engines listed in `spec_file` (name, namespace, model per line)."""
    from runtime.exposition.parse import filter_exposition
    from tests.support.prometheus import Replay, StandIn, Target

    text = filter_exposition((FIXTURES / EXPOSITION).read_text())
    targets = []
    for line in Path(spec_file).read_text().splitlines():
        name, namespace, model = line.split()
        replay = Replay([text], relabel={"model_name": model})
        # `pod` as Kubernetes discovery would add it: targets need distinct label sets.
        targets.append(Target(name, replay, {"namespace": namespace, "pod": name}))
    stand_in = StandIn(targets)
    print(stand_in.port, flush=True)
    Path(spec_file + ".config").write_text(stand_in.scrape_configs(SCRAPE_INTERVAL_S))
    print("ready", flush=True)
    while True:
        time.sleep(3600)


def start_stand_in(deps) -> tuple[int, str]:
    import tempfile

    spec = Path(tempfile.mkdtemp(prefix="bench-b6-")) / "targets.txt"
    spec.write_text("".join(f"d{d.pk} {d.tenant.namespace} {d.served_model_name}\n" for d in deps))
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(spec)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )

    def stop():
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)

    on_exit(stop)
    port = int(proc.stdout.readline())
    assert proc.stdout.readline().strip() == "ready"
    return port, (spec.parent / "targets.txt.config").read_text()


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def one_size(ids: list[int], cycles: int) -> dict:
    from django.conf import settings

    from deployments.models import ModelDeployment
    from metrics.collect import collect, rate_window_s
    from runtime.exposition.promql import fleet_points
    from tests.support.prometheus import Prometheus, require_prometheus

    deps = list(ModelDeployment.objects.filter(pk__in=ids).select_related("tenant").order_by("pk"))
    port, config = start_stand_in(deps)
    for dep in deps:
        dep.metrics_url = f"http://127.0.0.1:{port}/t/d{dep.pk}/metrics"
    ModelDeployment.objects.bulk_update(deps, ["metrics_url"], batch_size=500)
    ModelDeployment.objects.exclude(pk__in=ids).update(state="stopped")
    ModelDeployment.objects.filter(pk__in=ids).update(state="ready")

    require_prometheus()
    prom = Prometheus(config, interval_s=SCRAPE_INTERVAL_S)
    try:
        # Every target scraped at least RATE_WINDOW_S / interval + 1 times.
        needed = RATE_WINDOW_S / SCRAPE_INTERVAL_S + 1
        prom.wait_for(
            f"count(count_over_time(standin_scrape_index[1m]) >= {needed:g})",
            lambda r: bool(r) and int(float(r[0]["value"][1])) == len(ids),
            timeout=300,
        )
        settings.METRICS_SCRAPE_SECONDS = CYCLE_S
        settings.PROMETHEUS_SCRAPE_INTERVAL_SECONDS = SCRAPE_INTERVAL_S
        settings.PROMETHEUS_URL = prom.url
        assert rate_window_s() == RATE_WINDOW_S
        settings.METRICS_SCRAPE_TIMEOUT_SECONDS = 30  # time the answer, not a timeout on a loaded host
        out = {"queries": [], "prometheus": [], "direct": [], "stored": []}
        for _ in range(cycles + 1):
            settings.PROMETHEUS_URL = prom.url
            before = prom.query_requests()
            started = time.perf_counter()
            stored_prometheus = collect(ids)
            out["prometheus"].append(time.perf_counter() - started)
            out["queries"].append(prom.query_requests() - before)
            settings.PROMETHEUS_URL = None
            started = time.perf_counter()
            stored_direct = collect(ids)
            out["direct"].append(time.perf_counter() - started)
            out["stored"].append((stored_prometheus, stored_direct))
        # Of a Prometheus cycle, the part spent waiting for Prometheus's answers to its queries.
        out["answers"] = [
            timed(lambda: fleet_points(prom.url, window_s=RATE_WINDOW_S, timeout=60)) for _ in range(cycles + 1)
        ]
        out = {k: v[1:] for k, v in out.items()}  # the first round warms up (snapshots, caches)
        return out
    finally:
        prom.stop()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--cycles", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if not (FIXTURES / EXPOSITION).is_file():
        raise SystemExit(f"{FIXTURES} is missing (the real expositions live in ../shared)")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    header("B6 metrics cycle through Prometheus vs direct scrape")
    setup_django("b6_prometheus")
    from django.db.models import F

    from deployments.models import ModelDeployment
    from runtime.exposition.promql import QUERY_COUNT
    from runtime.exposition.snapshot import COUNTERS, GAUGES, HISTOGRAMS

    flavor = seed_flavor()
    tenants, members = seed_tenants("b6", flavor)
    all_ids = create_deployments(tenants, members, flavor, max(sizes), "m")
    ModelDeployment.objects.filter(pk__in=all_ids).update(backend="kserve", served_model_name=F("name"))
    families = len(COUNTERS) + len(GAUGES) + len(HISTOGRAMS)
    results = {}
    for n in sizes:
        results[n] = got = one_size(all_ids[:n], args.cycles)
        prom, direct = statistics.median(got["prometheus"]), statistics.median(got["direct"])
        queries = sorted(set(got["queries"]))
        row(
            f"N={n}: queries to Prometheus per cycle",
            f"{', '.join(f'{q:g}' for q in queries)} (QUERY_COUNT {QUERY_COUNT}, {families} metric families)",
            target="constant <= families",
        )
        row(
            f"N={n}: cycle wall, median of {args.cycles}",
            f"Prometheus {prom * 1e3:.0f} ms vs direct {direct * 1e3:.0f} ms: "
            f"direct / Prometheus = {direct / prom:.2f}x; points stored per cycle (Prometheus, direct): "
            f"min {min(p for p, _ in got['stored'])}, {min(d for _, d in got['stored'])} of {n}",
        )
        answers = statistics.median(got["answers"])
        row(f"N={n}: of which Prometheus answering (fleet_points alone)", f"{answers * 1e3:.0f} ms")
    if len(sizes) >= 2:
        xs = sizes
        fit = {}
        for path in ("prometheus", "direct"):
            ys = [statistics.median(results[n][path]) for n in xs]
            slope, intercept = statistics.linear_regression(xs, ys)
            fit[path] = (slope, intercept)
            row(f"fit {path}", f"{intercept * 1e3:.1f} ms + {slope * 1e3:.3f} ms per deployment")
        (sp, ip), (sd, idr) = fit["prometheus"], fit["direct"]
        crossover = (ip - idr) / (sd - sp) if sd > sp else float("inf")
        row("crossover fleet size (direct slower beyond)", f"{crossover:.0f} deployments")


if __name__ == "__main__":
    main()
