"""What does serving through the portal's local backend cost, against a hand-started vLLM server?

Same tiny model (`manage.py make_tiny_model`), same engine settings, same fixed load, one run:

* raw         — `python -m vllm.entrypoints.openai.api_server` started by hand with plain flags;
* portal-vllm — `LocalBackend` with the vLLM server engine (the app config rendered by the portal);
* portal-ray  — `LocalBackend` with the Ray Serve engine (the kuberay backend's Serve app).

Variants run one after another (two cores cannot host two engines fairly). Each reports the time
to healthy, then output tokens/s under the load, and the ratio to raw. vLLM's torch.compile cache
is shared, so only the first variant pays a cold compile; the order is fixed for comparability.

    .venv/bin/python bench/local_overhead.py [--engines raw,vllm,ray] [--requests 32 --concurrency 4 --tokens 64]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
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

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from runtime.local import ENGINES, LocalBackend, PortAllocator, http_ok, terminate_session  # noqa: E402
from runtime.spec import DeploymentSpec, EngineOptions, FlavorSpec  # noqa: E402

MODEL_NAME = "tiny-llama"
MAX_MODEL_LEN = 512
READY_TIMEOUT = 600


def load(base_url: str, requests_total: int, concurrency: int, tokens: int) -> tuple[float, float]:
    """(output tokens/s, seconds) for `requests_total` completions, `concurrency` at a time."""
    def one(i: int) -> int:
        response = requests.post(f"{base_url}/completions", timeout=300, json={
            "model": MODEL_NAME, "prompt": f"Request {i}: the tenant asks the model", "max_tokens": tokens,
            "temperature": 0, "ignore_eos": True})
        response.raise_for_status()
        return response.json()["usage"]["completion_tokens"]

    with ThreadPoolExecutor(concurrency) as pool:
        # Warm-up at the measured concurrency, not timed: vLLM compiles/warms kernels for batch
        # shapes it first sees, which otherwise lands on whichever variant runs first.
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


def run_raw(model: Path, workdir: Path, args) -> tuple[float, float, float]:
    port = PortAllocator(workdir / "ports").allocate(1)[0]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(settings.LOCAL_KVCACHE_GIB),
           "OMP_NUM_THREADS": str(settings.LOCAL_ENGINE_THREADS), "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", str(MAX_MODEL_LEN), "--block-size", "32"]
    with open(workdir / "raw.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        def check() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"raw server exited; see {workdir / 'raw.log'}")
            return http_ok(f"http://127.0.0.1:{port}/health")
        ready = wait_ready(check, "raw vLLM")
        return (ready, *load(f"http://127.0.0.1:{port}/v1", args.requests, args.concurrency, args.tokens))
    finally:
        terminate_session(proc.pid, None, 20)
        proc.wait(timeout=10)


def run_portal(engine: str, model: Path, workdir: Path, args) -> tuple[float, float, float]:
    spec = DeploymentSpec(deployment_id=1, name="bench", namespace="bench", tenant_slug="bench", queue_name="lq",
                          model_source=str(model), served_model_name=MODEL_NAME, backend="local",
                          flavor=FlavorSpec(name="cpu", gpu_model="CPU", accelerator_type="",
                                            gpu_memory_gib=0, gpus_per_node=1),
                          engine=EngineOptions(max_model_len=MAX_MODEL_LEN))
    backend = LocalBackend(workdir / f"portal-{engine}", engine=ENGINES[engine](),
                           kvcache_gib=settings.LOCAL_KVCACHE_GIB, threads=settings.LOCAL_ENGINE_THREADS)
    try:
        obs = backend.ensure(spec)

        def check() -> bool:
            nonlocal obs
            obs = backend.observe(spec)
            if obs.state == "failed":
                raise RuntimeError(obs.message)
            return obs.state == "ready"
        ready = wait_ready(check, f"portal ({engine})")
        return (ready, *load(obs.endpoint_url, args.requests, args.concurrency, args.tokens))
    finally:
        backend.remove(spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="raw,vllm,ray")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="local-overhead-") as tmp:
        workdir = Path(tmp)
        model = workdir / "tiny-llama"
        call_command("make_tiny_model", output=model, verbosity=0)
        results: dict[str, tuple[float, float, float]] = {}
        for engine in args.engines.split(","):
            print(f"running {engine} ...", flush=True)
            results[engine] = (run_raw(model, workdir, args) if engine == "raw"
                               else run_portal(engine, model, workdir, args))
    print(f"\n{args.requests} requests, {args.concurrency} concurrent, {args.tokens} output tokens each "
          f"(tiny Llama, {os.cpu_count()} CPUs, KV cache {settings.LOCAL_KVCACHE_GIB} GiB, "
          f"{settings.LOCAL_ENGINE_THREADS} threads)")
    print(f"{'variant':<12} {'ready s':>8} {'load s':>8} {'out tok/s':>10} {'vs raw':>7}")
    raw = results.get("raw")
    for engine, (ready, tps, elapsed) in results.items():
        ratio = f"{tps / raw[1]:.2f}" if raw else "-"
        print(f"{engine:<12} {ready:>8.1f} {elapsed:>8.1f} {tps:>10.1f} {ratio:>7}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # run the finally blocks on SIGTERM
    main()
