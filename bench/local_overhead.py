"""What does serving through the portal's local backend cost, against a hand-started vLLM server?

Same tiny model (`manage.py make_tiny_model`), same engine settings, same fixed load, one run:

* raw         — `python -m vllm.entrypoints.openai.api_server` started by hand with plain flags;
* portal-vllm — `LocalBackend` with the vLLM server engine (the app config rendered by the portal);
* portal-ray  — `LocalBackend` with the Ray Serve engine (the kuberay backend's Serve app).

All variants are started first, one after another (each waits for the previous to be healthy,
so compiles do not overlap), and stay up; then the load runs against them in turns: `--rounds`
rounds, each round visiting every variant once, in an order that rotates from round to round.
An idle vLLM engine waits on its socket, so the variant under load has the cores. Each round
gives a ratio of output tokens/s to raw measured minutes apart on the same warm engines; the
median over rounds and the range are reported. A second raw server (the default engines are
raw,raw,vllm) is the A/A control: its ratio to the first shows the noise floor, so a portal ratio
inside that range means no overhead this machine can resolve. (Earlier versions ran the variants one after
another, once each; order and compile effects then swamped the difference: 1.69, 0.61, 0.80.)

    .venv/bin/python bench/local_overhead.py [--engines raw,raw,vllm] [--rounds 9] \
        [--requests 64 --concurrency 4 --tokens 64]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
from runtime.backends.local.engine import ENGINES, http_ok  # noqa: E402
from runtime.backends.local.ports import PortAllocator  # noqa: E402
from runtime.backends.local.processes import session_members, terminate_session  # noqa: E402
from runtime.spec import DeploymentSpec, EngineOptions, FlavorSpec  # noqa: E402

MODEL_NAME = "tiny-llama"
MAX_MODEL_LEN = 512
READY_TIMEOUT = 600


def load(
    base_url: str, requests_total: int, concurrency: int, tokens: int, *, warm_up: bool = True
) -> tuple[float, float]:
    """(output tokens/s, seconds) for `requests_total` completions, `concurrency` at a time."""

    def one(i: int) -> int:
        response = requests.post(
            f"{base_url}/completions",
            timeout=300,
            json={
                "model": MODEL_NAME,
                "prompt": f"Request {i}: the tenant asks the model",
                "max_tokens": tokens,
                "temperature": 0,
                "ignore_eos": True,
            },
        )
        response.raise_for_status()
        return response.json()["usage"]["completion_tokens"]

    with ThreadPoolExecutor(concurrency) as pool:
        # Warm-up at the measured concurrency, not timed: vLLM compiles/warms kernels for batch
        # shapes it first sees, which otherwise lands on whichever variant runs first.
        if warm_up:
            list(pool.map(one, range(2 * concurrency)))
        started = time.monotonic()
        produced = sum(pool.map(one, range(requests_total)))
    elapsed = time.monotonic() - started
    return produced / elapsed, elapsed


def wait_ready(check, what: str) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > READY_TIMEOUT:
            raise RuntimeError(f"{what} not ready after {READY_TIMEOUT}s")
        time.sleep(1)
    return time.monotonic() - started


@dataclass
class Variant:
    name: str
    base_url: str
    ready_s: float
    stop: Callable[[], None]
    pids: Callable[[], list[int]]
    rates: list[float] = field(default_factory=list)


def idle_cpu(variant: Variant, seconds: float = 5.0) -> float:
    """Cores the variant's processes use while nobody sends it requests."""
    before = cpu_seconds(variant.pids())
    time.sleep(seconds)
    return (cpu_seconds(variant.pids()) - before) / seconds


def start_raw(model: Path, workdir: Path) -> Variant:
    port = PortAllocator(workdir / "local").allocate(1)[0]
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": str(settings.LOCAL_KVCACHE_GIB),
        "OMP_NUM_THREADS": str(settings.LOCAL_ENGINE_THREADS),
        "HF_HUB_OFFLINE": "1",
    }
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--block-size",
        "32",
    ]
    with open(workdir / "raw.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def stop() -> None:
        terminate_session(proc.pid, None, 20)
        proc.wait(timeout=10)

    def check() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"raw server exited; see {workdir / 'raw.log'}")
        return http_ok(f"http://127.0.0.1:{port}/health")

    try:
        ready = wait_ready(check, "raw vLLM")
    except BaseException:
        stop()
        raise
    return Variant("raw", f"http://127.0.0.1:{port}/v1", ready, stop, lambda: session_members(proc.pid))


def start_portal(engine: str, number: int, model: Path, workdir: Path) -> Variant:
    spec = DeploymentSpec(
        deployment_id=number,
        name=f"bench-{engine}",
        namespace="bench",
        tenant_slug="bench",
        queue_name="lq",
        model_source=str(model),
        served_model_name=MODEL_NAME,
        backend="local",
        flavor=FlavorSpec(name="cpu", gpu_model="CPU", accelerator_type="", gpu_memory_gib=0, gpus_per_node=1),
        engine=EngineOptions(max_model_len=MAX_MODEL_LEN),
    )
    backend = LocalBackend(
        workdir / "local",
        engine=ENGINES[engine](),
        model_root=model.parent,
        kvcache_gib=settings.LOCAL_KVCACHE_GIB,
        threads=settings.LOCAL_ENGINE_THREADS,
    )
    obs = backend.ensure(spec)

    def check() -> bool:
        nonlocal obs
        obs = backend.observe(spec)
        if obs.state == "failed":
            raise RuntimeError(obs.message)
        return obs.state == "ready"

    try:
        ready = wait_ready(check, f"portal ({engine})")
    except BaseException:
        backend.remove(spec)
        raise
    state = backend.load_state(spec.deployment_id)
    return Variant(
        f"portal-{engine}",
        obs.endpoint_url,
        ready,
        lambda: backend.remove(spec),
        lambda: session_members(state.pid) if state else [],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--engines",
        default="raw,raw,vllm",
        help="raw first; a second raw is the A/A control (the noise floor); add ray for the Ray Serve path",
    )
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    engines = args.engines.split(",")
    variants: list[Variant] = []
    with tempfile.TemporaryDirectory(prefix="local-overhead-") as tmp:
        workdir = Path(tmp)
        model = workdir / "tiny-llama"
        call_command("make_tiny_model", output=model, verbosity=0)
        try:
            for number, engine in enumerate(engines, start=1):
                print(f"starting {engine} ...", flush=True)
                variant = start_raw(model, workdir) if engine == "raw" else start_portal(engine, number, model, workdir)
                if any(v.name == variant.name for v in variants):  # a second raw: the A/A control
                    variant.name += f"-{number}"
                variants.append(variant)
            for variant in variants:
                print(f"idle CPU of {variant.name}: {idle_cpu(variant):.2f} cores over 5 s", flush=True)
            for variant in variants:  # warm every engine at the measured shape, untimed
                load(variant.base_url, 2 * args.concurrency, args.concurrency, args.tokens, warm_up=False)
            for r in range(args.rounds):
                order = variants[r % len(variants) :] + variants[: r % len(variants)]
                for variant in order:
                    tps, _ = load(variant.base_url, args.requests, args.concurrency, args.tokens, warm_up=False)
                    variant.rates.append(tps)
                print(f"round {r + 1}: " + ", ".join(f"{v.name} {v.rates[-1]:.1f}" for v in order), flush=True)
        finally:
            for variant in variants:
                variant.stop()
    print(
        f"\n{args.rounds} rounds x {args.requests} requests, {args.concurrency} concurrent, {args.tokens} output "
        f"tokens each (tiny Llama, {os.cpu_count()} CPUs, KV cache {settings.LOCAL_KVCACHE_GIB} GiB, "
        f"{settings.LOCAL_ENGINE_THREADS} threads per engine)"
    )
    print(f"{'variant':<13} {'ready s':>8} {'median tok/s':>13} {'ratio to raw: median':>21} {'min-max':>12}")
    raw = variants[0] if variants and variants[0].name == "raw" else None
    for variant in variants:
        ratios = [v / r for v, r in zip(variant.rates, raw.rates, strict=True)] if raw else []
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if ratios else "-"
        median_ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        print(
            f"{variant.name:<13} {variant.ready_s:>8.1f} {statistics.median(variant.rates):>13.1f} "
            f"{median_ratio:>21} {spread:>12}"
        )


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # run the finally blocks on SIGTERM
    main()
