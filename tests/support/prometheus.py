"""A real Prometheus (Debian's ``prometheus`` binary) scraping stand-in model servers.

:class:`StandIn` serves real expositions (../shared/fixtures/metrics) on one HTTP port, one path
per target, as an engine's ``/metrics`` would: each scrape of a target gets its next exposition
with counters advancing (a captured series is replayed in a loop, each loop's counters offset by
the loop's growth so they never go back; a single capture grows by a fixed share per scrape).
Every answer also carries ``standin_scrape_index <k>``, so a test can ask Prometheus which
exposition it stored at which time and compute the same figures on the direct path from
:meth:`StandIn.text` — the very text Prometheus read.

:class:`Prometheus` runs the binary with a generated config (static targets, a short scrape
interval), a temporary TSDB and a free loopback port; it never uses the package's systemd unit.
Without the binary the tests skip with the reason (fail under CI).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

PROMETHEUS_BINARY = os.environ.get("PROMETHEUS_BINARY") or shutil.which("prometheus") or "/usr/bin/prometheus"
_SAMPLE = re.compile(r"^([^\s{#]+)(\{.*\})?\s+(\S+)\s*$")
_TYPE = re.compile(r"^# TYPE (\S+) (\w+)")
GROWTH_PER_SCRAPE = 0.05  # a single capture's counters grow by this share of their value per scrape


def require_prometheus() -> str:
    """The binary's path, or skip (fail under CI) when it is not installed."""
    if os.path.exists(PROMETHEUS_BINARY) and os.access(PROMETHEUS_BINARY, os.X_OK):
        return PROMETHEUS_BINARY
    message = f"no Prometheus binary at {PROMETHEUS_BINARY}: `apt-get install prometheus` (Debian) to run these tests"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI is set, so this is an error, not a skip)")
    pytest.skip(message)


def duration(seconds: float) -> str:
    """A Prometheus duration (whole milliseconds: it refuses "1.0s")."""
    return f"{max(1, round(seconds * 1000))}ms"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cumulative_samples(text: str) -> set[str]:
    """Sample names that only go up: counters' ``_total`` and histograms' bucket/count/sum."""
    names: set[str] = set()
    for line in text.splitlines():
        match = _TYPE.match(line)
        if match and match.group(2) == "counter":
            family = match.group(1)
            names.update({family, family + "_total"} if not family.endswith("_total") else {family})
        elif match and match.group(2) == "histogram":
            names.update(match.group(1) + suffix for suffix in ("_bucket", "_count", "_sum"))
    return names


class Replay:
    """One target's expositions: ``text(k)`` is what its k-th scrape returns (k from 0)."""

    def __init__(self, texts: Sequence[str], *, relabel: dict[str, str] | None = None, hold: bool = False) -> None:
        """`relabel` maps a label name to the value every series of the target gets for it
        (e.g. ``{"model_name": "m-7"}``: one engine per deployment from one capture). `hold`
        plays the texts once and then keeps answering the last one: an engine that went idle
        and stays so (its counters offset by one pass of the series, so they start well above
        zero, as a looping replay's second pass does)."""
        self.hold = hold
        texts = list(texts)
        for label, value in (relabel or {}).items():
            pattern = re.compile(rf'(?<=[{{,]){re.escape(label)}="(?:[^"\\]|\\.)*"')
            texts = [pattern.sub(f'{label}="{value}"', t) for t in texts]
        cumulative = _cumulative_samples(texts[0])
        # Each text as [(line prefix, value or None for a line kept as is, cumulative?)].
        self.parsed: list[list[tuple[str, float | None, bool]]] = []
        for text in texts:
            rows: list[tuple[str, float | None, bool]] = []
            for line in text.splitlines():
                match = _SAMPLE.match(line) if line and line[0] != "#" else None
                if match is None:
                    rows.append((line, None, False))
                else:
                    prefix = match.group(1) + (match.group(2) or "")
                    rows.append((prefix, float(match.group(3)), match.group(1) in cumulative))
            self.parsed.append(rows)
        first = {p: v for p, v, c in self.parsed[0] if c and v is not None}
        last = {p: v for p, v, c in self.parsed[-1] if c and v is not None}
        self.loop_growth = {p: last[p] - first.get(p, 0.0) for p in last}

    def frame(self, k: int) -> int:
        """Which text scrape k answers."""
        return min(k, len(self.parsed) - 1) if self.hold else k % len(self.parsed)

    def value(self, prefix: str, value: float, k: int) -> float:
        """A cumulative sample's value at scrape k."""
        loops = 1 if self.hold else k // len(self.parsed)
        if len(self.parsed) == 1:
            return value * (1.0 + GROWTH_PER_SCRAPE * k)
        return value + loops * self.loop_growth.get(prefix, 0.0)

    def text(self, k: int) -> str:
        out: list[str] = []
        for prefix, value, cumulative in self.parsed[self.frame(k)]:
            if value is None:
                out.append(prefix)
            else:
                shown = self.value(prefix, value, k) if cumulative else value
                out.append(f"{prefix} {shown!r}")
        out.append("# TYPE standin_scrape_index gauge")
        out.append(f"standin_scrape_index {k}")
        return "\n".join(out) + "\n"


@dataclass
class Target:
    name: str  # the path segment: /t/<name>/metrics
    replay: Replay
    labels: dict[str, str] = field(default_factory=dict)  # target labels Prometheus adds
    scrapes: int = 0


class StandIn:
    """Serves every target's next exposition on each scrape (see the module docstring)."""

    def __init__(self, targets: Sequence[Target], *, start_at: int | None = None) -> None:
        """`start_at` is every target's first scrape index; None starts a replayed series one
        loop in and a single capture 15 scrapes in, so every counter that moves is already well
        above zero (Prometheus clamps its extrapolation at a counter's zero), and a held replay
        at its first text (its counters are offset instead)."""
        self.targets = {t.name: t for t in targets}
        for target in targets:
            loop = len(target.replay.parsed)
            first = 0 if target.replay.hold else (loop if loop > 1 else 15)
            target.scrapes = start_at if start_at is not None else first
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                parts = self.path.split("/")
                target = stand_in.targets.get(parts[2]) if len(parts) == 4 and parts[1] == "t" else None
                if target is None:
                    self.send_error(404)
                    return
                with stand_in._lock:
                    k = target.scrapes
                    target.scrapes += 1
                body = target.replay.text(k).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def text(self, name: str, k: int) -> str:
        """The exposition target `name` served at its k-th scrape."""
        return self.targets[name].replay.text(k)

    def scrape_configs(self, interval_s: float) -> str:
        """The ``scrape_configs`` YAML for every target (static, one path each)."""
        lines = ["scrape_configs:", "  - job_name: standin", f"    scrape_interval: {duration(interval_s)}"]
        lines += [f"    scrape_timeout: {duration(interval_s)}", "    static_configs:"]
        for target in self.targets.values():
            lines.append(f"      - targets: ['127.0.0.1:{self.port}']")
            lines.append("        labels:")
            lines.append(f"          __metrics_path__: /t/{target.name}/metrics")
            lines += [f"          {key}: '{value}'" for key, value in target.labels.items()]
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    """A running Prometheus: ``url``, ``query``, ``wait_for``; stop with :meth:`stop`."""

    def __init__(self, scrape_configs: str, *, interval_s: float = 1.0, binary: str | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="prometheus-"))
        config = self.dir / "prometheus.yml"
        head = f"global:\n  scrape_interval: {duration(interval_s)}\n  evaluation_interval: 1m\n"
        config.write_text(head + scrape_configs)
        self.log = open(self.dir / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        for _ in range(5):
            # The port is free when picked, but another suite's Prometheus may take it before ours
            # binds: then ours exits, and the answers on that port are not ours. Pick another.
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.process = subprocess.Popen(
                [
                    binary or require_prometheus(),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                ],
                stdout=self.log,
                stderr=subprocess.STDOUT,
            )
            if self._wait_ready():
                return
        raise RuntimeError(f"prometheus did not start: {(self.dir / 'prometheus.log').read_text()[-2000:]}")

    def _wait_ready(self, timeout: float = 30.0) -> bool:
        """True once this process answers ready; False when its port turned out to be taken."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ready = requests.get(self.url + "/-/ready", timeout=1).status_code == 200
                flags = requests.get(self.url + "/api/v1/status/flags", timeout=2).json()["data"] if ready else {}
            except (requests.RequestException, ValueError, KeyError):
                ready, flags = False, {}
            if ready and flags.get("storage.tsdb.path") == str(self.dir / "data"):
                return True
            if self.process.poll() is not None:
                if "address already in use" in (self.dir / "prometheus.log").read_text():
                    return False
                raise RuntimeError(f"prometheus exited: {(self.dir / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        raise RuntimeError("prometheus did not become ready")

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        answer = requests.get(self.url + "/api/v1/query", params=params, timeout=10).json()
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def wait_for(self, promql: str, predicate, timeout: float = 60.0) -> list[dict]:
        """Poll `promql` until `predicate(result)` holds."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if predicate(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{promql}: still {result} after {timeout} s")
            time.sleep(0.25)

    def query_requests(self) -> float:
        """How many instant queries this Prometheus has answered: its own counter, read from
        its /metrics (it does not scrape itself here)."""
        text = requests.get(self.url + "/metrics", timeout=10).text
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "prometheus_http_requests_total" and sample.labels.get("handler") == "/api/v1/query"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def running(stand_in: StandIn, *, interval_s: float = 1.0) -> Iterator[Prometheus]:
    """A Prometheus scraping `stand_in` every `interval_s`, stopped afterwards."""
    prometheus = Prometheus(stand_in.scrape_configs(interval_s), interval_s=interval_s)
    try:
        yield prometheus
    finally:
        prometheus.stop()
