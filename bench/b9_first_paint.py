"""B9 — First paint of a deployment's detail page, side by side with the overview, in Chromium.

Serves the portal as `scripts/demo` does (gunicorn with the demo's config, DEBUG off, the hashed
and compressed files of collectstatic served by WhiteNoise) over the demo data (`manage.py demo`),
plus an hour of metrics on one deployment so that its charts draw (and plotly.js is fetched).
Each page is opened `--rounds` times, each time in a fresh browser context (an empty HTTP cache,
the demo member's session), pages in rotating order. Read from the page: Paint Timing
(first-contentful-paint), Navigation Timing (DOMContentLoaded, load) and the bytes transferred;
for the page with metrics also the time until the first chart is drawn.

Target: the detail page's first contentful paint under 1 s; reported as a ratio to the overview's.
"First byte" is the server's part (the page's queries and template), the rest is the browser's.

    .venv/bin/python bench/b9_first_paint.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, header, on_exit, row, setup_django  # noqa: E402

TIMING = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  const bytes = [nav, ...performance.getEntriesByType('resource')].reduce((n, e) => n + (e.transferSize || 0), 0);
  return {ttfb: nav.responseStart, fcp: fcp ? fcp.startTime : null, dcl: nav.domContentLoadedEventEnd,
          load: nav.loadEventEnd, bytes};
}"""


def seed_metrics(name: str, minutes: int = 60) -> int:
    """The demo deployment `name` as ready, with a sample every 15 s over the last `minutes`."""
    from django.utils import timezone

    from deployments.models import ModelDeployment
    from metrics.models import MetricSample, Resolution

    dep = ModelDeployment.objects.get(name=name)
    ModelDeployment.objects.filter(pk=dep.pk).update(state="ready", endpoint_url="http://10.0.0.7:8000/v1")
    now = timezone.now()
    MetricSample.objects.bulk_create(
        MetricSample(
            deployment=dep,
            resolution=Resolution.RAW,
            ts=now - timedelta(seconds=15 * (minutes * 4 - i)),
            prompt_tokens_per_s=800 + 3.5 * i,
            generation_tokens_per_s=120 + 1.2 * i,
            requests_per_s=1.5 + 0.01 * i,
            errors_per_s=0.0,
            kv_cache_pct=20 + (i % 60),
            running=float(4 + i % 5),
            waiting=float(i % 3),
            ttft_p50=0.18,
            ttft_p95=0.42,
            itl_p50=0.021,
            itl_p95=0.035,
            e2e_p50=2.1,
            e2e_p95=4.8,
        )
        for i in range(minutes * 4)
    )
    return dep.pk


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(port: int) -> subprocess.Popen:
    web = subprocess.Popen(
        [
            str(ROOT / ".venv/bin/gunicorn"),
            "portal.wsgi",
            "-c",
            str(ROOT / "scripts/gunicorn.conf.py"),
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--threads",
            "4",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def stop():
        web.terminate()
        web.wait(timeout=30)

    on_exit(stop)
    import requests

    for _ in range(120):
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok:
                return web
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise SystemExit("gunicorn did not start")


def measure(base: str, pages: dict[str, tuple[str, str | None]], rounds: int) -> dict[str, list[dict]]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("needs Debian's chromium (apt-get install chromium)")
    results: dict[str, list[dict]] = {name: [] for name in pages}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"])
        login = browser.new_context(base_url=base)
        page = login.new_page()
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill("search-member")
        page.get_by_label("Password").fill("demo-password-123")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{base}/")
        session = login.storage_state()
        login.close()
        names = list(pages)
        for r in range(rounds + 1):  # round 0 warms the server (templates, connections): not counted
            for name in names[r % len(names) :] + names[: r % len(names)]:
                path, drawn = pages[name]
                viewport = {"width": 1366, "height": 900}
                context = browser.new_context(base_url=base, storage_state=session, viewport=viewport)
                page = context.new_page()
                page.goto(path, wait_until="load")
                if drawn:
                    page.wait_for_selector(drawn, timeout=30_000)
                    charts_ms = page.evaluate("() => performance.now()")
                page.wait_for_timeout(200)  # paint entries are queued after the frame
                timing = page.evaluate(TIMING)
                if drawn:
                    timing["charts"] = charts_ms
                if r:
                    results[name].append(timing)
                context.close()
        browser.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    var = tempfile.mkdtemp(prefix="bench-b7-")
    on_exit(lambda: shutil.rmtree(var, ignore_errors=True))
    setup_django("b7", PORTAL_VAR_DIR=var, STATIC_MANIFEST="true", CELERY_TASK_ALWAYS_EAGER="true")
    from django.core.management import call_command

    call_command("collectstatic", interactive=False, verbosity=0)
    call_command("demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    from deployments.models import ModelDeployment

    with_metrics = seed_metrics("llama3-70b-chat")
    empty = ModelDeployment.objects.get(name="qwen-7b-rerank").pk
    port = free_port()
    serve(port)
    pages = {
        "overview": ("/", None),
        "detail, no metrics": (f"/deployments/{empty}/", None),
        "detail, 1 h of metrics": (f"/deployments/{with_metrics}/", "#chart-tokens .main-svg"),
    }
    results = measure(f"http://127.0.0.1:{port}", pages, args.rounds)

    header(f"B9 first paint, {args.rounds} cold loads per page, Chromium 1366x900")
    median = {name: {k: statistics.median(t[k] for t in runs) for k in runs[0]} for name, runs in results.items()}
    for name, runs in results.items():
        fcps = sorted(t["fcp"] for t in runs)
        row(
            f"{name}: first contentful paint",
            f"{median[name]['fcp']:.0f} ms (range {fcps[0]:.0f}–{fcps[-1]:.0f})",
            target="< 1000 ms" if name != "overview" else "",
        )
        row(
            f"{name}: first byte / DOMContentLoaded / load",
            f"{median[name]['ttfb']:.0f} / {median[name]['dcl']:.0f} / {median[name]['load']:.0f} ms",
        )
        row(f"{name}: bytes transferred", f"{median[name]['bytes'] / 1024:.0f} KiB")
        if "charts" in median[name]:
            row(f"{name}: first chart drawn", f"{median[name]['charts']:.0f} ms")
    for name in list(pages)[1:]:
        row(f"FCP ratio {name} ÷ overview", f"{median[name]['fcp'] / median['overview']['fcp']:.2f}×")


if __name__ == "__main__":
    main()
