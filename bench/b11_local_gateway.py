"""B11: what the local gateway adds to a call, against the same engine called directly.

One vLLM CPU engine with the tiny model (`manage.py make_tiny_model`) behind `LocalBackend(gateway=True)`;
every measurement alternates the two paths request by request (or round by round), so both see
the same engine, the same warm caches and the same host noise:

* direct  — the engine's own loopback port, with the one key it takes (the gateway's upstream key);
* gateway — the tenant's port (routing by `model`, the key checked against digests, usage logged).

Figures: p50/p95 of a 1-token completion and of GET /v1/models through the deployment's port (all
proxy, little engine work), and the added latency (gateway minus direct, per percentile); output
tokens/s with streaming at a fixed concurrency, ratio gateway ÷ direct per round, median and range;
and the CPU the gateway process itself spent per streamed token (from /proc), next to the engine's:
on a small shared machine the gateway's cost is the CPU it takes from the engine, which this
figure states without the host's noise.

    .venv/bin/python bench/b11_local_gateway.py [--samples 300] [--rounds 7] [--requests 32 --concurrency 4 --tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from _common import cpu_seconds  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from runtime.backends.local.backend import LocalBackend  # noqa: E402
from runtime.backends.local.engine import VllmServer  # noqa: E402
from runtime.backends.local.gateway import upstream_key  # noqa: E402
from runtime.backends.local.keys import store_key  # noqa: E402
from runtime.backends.local.processes import session_members  # noqa: E402
from runtime.spec import DeploymentSpec, EngineOptions, FlavorSpec  # noqa: E402

MODEL = "tiny-llama"
KEY = "llmp_" + "benchmark" * 5
SEED = "bench-b11"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(session: requests.Session, method: str, url: str, key: str, body: dict | None) -> float:
    started = time.perf_counter()
    answer = session.request(method, url, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    answer.raise_for_status()
    return (time.perf_counter() - started) * 1000


def latency(paths: dict[str, tuple[str, str]], method: str, path: str, body: dict | None, samples: int) -> dict:
    """ms per call on each path, alternating; keep-alive sessions on both (as a client would)."""
    sessions = {name: requests.Session() for name in paths}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for i in range(samples + 10):
        for name in sorted(paths, reverse=i % 2 == 1):
            base, key = paths[name]
            took = timed(sessions[name], method, base + path, key, body)
            if i >= 10:  # the first ones warm connections and the engine
                times[name].append(took)
    return times


def stream_tokens(base: str, key: str, n: int, concurrency: int, tokens: int) -> float:
    """Output tokens/s of `n` streamed completions, `concurrency` at a time (tokens counted from the
    streamed events themselves: one per event)."""

    def one(i: int) -> int:
        body = {"model": MODEL, "prompt": f"Request {i}: the tenant asks", "max_tokens": tokens}
        body |= {"stream": True, "ignore_eos": True, "temperature": 0}
        with requests.post(
            f"{base}/completions", json=body, headers={"Authorization": f"Bearer {key}"}, stream=True, timeout=300
        ) as answer:
            answer.raise_for_status()
            events = [line for line in answer.iter_lines() if line.startswith(b"data: {")]
        return sum(1 for e in events if json.loads(e[6:]).get("choices"))

    with ThreadPoolExecutor(concurrency) as pool:
        started = time.monotonic()
        produced = sum(pool.map(one, range(n)))
    return produced / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="b11-") as tmp:
        root, model = Path(tmp) / "local", Path(tmp) / "tiny-llama"
        call_command("make_tiny_model", output=model, verbosity=0)
        spec = DeploymentSpec(
            deployment_id=1,
            name="bench",
            namespace="bench",
            tenant_slug="bench",
            queue_name="lq",
            model_source=str(model),
            served_model_name=MODEL,
            backend="local",
            flavor=FlavorSpec(name="cpu", gpu_model="CPU", accelerator_type="", gpu_memory_gib=0, gpus_per_node=1),
            engine=EngineOptions(max_model_len=512),
        )
        backend = LocalBackend(
            root,
            engine=VllmServer(),
            model_root=model.parent,
            kvcache_gib=settings.LOCAL_KVCACHE_GIB,
            threads=settings.LOCAL_ENGINE_THREADS,
            key_seed=SEED,
            gateway=True,
        )
        store_key(root, tenant_slug="bench", key_id=1, deployment_id=None, api_key=KEY)
        try:
            run(backend, spec, args)
        finally:
            backend.remove(spec)
            backend.stop_all()


def run(backend: LocalBackend, spec: DeploymentSpec, args: argparse.Namespace) -> None:
    started = time.monotonic()
    obs = backend.ensure(spec)
    while obs.state == "provisioning" and time.monotonic() - started < 600:
        time.sleep(1)
        obs = backend.ensure(spec)
    if obs.state != "ready":
        raise RuntimeError(f"{obs.state}: {obs.message}")
    print(f"engine and gateway ready after {time.monotonic() - started:.0f} s", flush=True)
    direct = f"http://127.0.0.1:{backend.load_state(1).ports[0]}/v1"
    paths = {"direct": (direct, upstream_key(SEED, 1)), "gateway": (backend.tenant_endpoint("bench"), KEY)}
    through_port = {"direct": paths["direct"], "gateway": (obs.endpoint_url, KEY)}
    one_token = {"model": MODEL, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
    rows = [
        ("POST /completions, 1 token (tenant port)", latency(paths, "POST", "/completions", one_token, args.samples)),
        ("GET /models (deployment port)", latency(through_port, "GET", "/models", None, args.samples)),
    ]
    print(f"\nlatency, {args.samples} calls per path, alternating, keep-alive ({os.cpu_count()} CPUs)")
    print(f"{'call':<42} {'direct p50/p95 ms':>18} {'gateway p50/p95 ms':>19} {'added p50/p95 ms':>17}")
    for label, times in rows:
        d50, d95 = percentile(times["direct"], 0.5), percentile(times["direct"], 0.95)
        g50, g95 = percentile(times["gateway"], 0.5), percentile(times["gateway"], 0.95)
        print(f"{label:<42} {d50:>8.2f} / {d95:<7.2f} {g50:>9.2f} / {g95:<7.2f} {g50 - d50:>7.2f} / {g95 - d95:<7.2f}")

    ratios, rates = [], {"direct": [], "gateway": []}
    gateway_pid, engine_pids = backend.gateway._state()["pid"], session_members(backend.load_state(1).pid)
    cpu = {"gateway": 0.0, "engine": 0.0}
    for name in paths:  # warm both at the measured shape, untimed
        stream_tokens(*paths[name], 2 * args.concurrency, args.concurrency, args.tokens)
    for r in range(args.rounds):
        for name in sorted(paths, reverse=r % 2 == 1):
            before = cpu_seconds([gateway_pid]), cpu_seconds(engine_pids)
            rates[name].append(stream_tokens(*paths[name], args.requests, args.concurrency, args.tokens))
            if name == "gateway":
                cpu["gateway"] += cpu_seconds([gateway_pid]) - before[0]
                cpu["engine"] += cpu_seconds(engine_pids) - before[1]
        ratios.append(rates["gateway"][-1] / rates["direct"][-1])
        print(f"round {r + 1}: direct {rates['direct'][-1]:.1f} tok/s, gateway {rates['gateway'][-1]:.1f} tok/s")
    print(
        f"\nstreamed output tokens/s, {args.rounds} rounds x {args.requests} requests x {args.tokens} tokens, "
        f"{args.concurrency} concurrent: direct {statistics.median(rates['direct']):.1f}, "
        f"gateway {statistics.median(rates['gateway']):.1f}; ratio gateway/direct median "
        f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f})"
    )
    streamed = args.rounds * args.requests * args.tokens
    print(
        f"CPU per streamed token through the gateway: gateway process {cpu['gateway'] / streamed * 1e6:.0f} µs, "
        f"engine processes {cpu['engine'] / streamed * 1e6:.0f} µs (gateway ÷ engine "
        f"{cpu['gateway'] / max(cpu['engine'], 1e-9):.3f})"
    )


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # run the finally blocks on SIGTERM
    main()
