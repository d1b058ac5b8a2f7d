"""LocalBackend: each deployment as a detached local engine process, found again through its
state file by any worker after any restart (see the package docstring)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from runtime.backends.base import digest
from runtime.backends.local.engine import ENGINES, READY_FILE, Engine, VllmServer, engine_environment, local_llm_config
from runtime.backends.local.gateway import ENGINE_OWNER, LocalGateway, port_open, upstream_key
from runtime.backends.local.insight import engine_logs, engine_markers
from runtime.backends.local.keys import ENGINE_KEY_CHECK, ENGINE_KEYS_ENV, keys_for, write_engine_keys
from runtime.backends.local.paths import engine_model_source
from runtime.backends.local.ports import STATE_FILE, PortAllocator
from runtime.backends.local.processes import (
    boot_id,
    log_tail,
    process_alive,
    process_start_time,
    spawn,
    terminate_session,
)
from runtime.gateway_local.routes import WAKE_PATH
from runtime.keys import portal_key
from runtime.spec import DeploymentSpec
from runtime.status import Observation, absent_observation, standard_conditions

ENGINE_NOT_INSTALLED = "engine not installed: pip install '.[local]'"
LOG_FILE = "engine.log"


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
    tenant_slug: str = ""  # the gateway's routing table is built from these two
    model: str = ""


class LocalBackend:
    """Runs each deployment as a detached local engine process; see the package docstring."""

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
        key_seed: str = "",
        gateway: bool = False,
        portal_url: str | None = None,
    ):
        self.root = Path(root)
        self.key_seed = key_seed  # derives the portal's Try-it key per deployment (runtime.keys)
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
        # The local gateway in front of the engines (runtime.backends.local.gateway); without it
        # each engine is its own endpoint and checks the keys itself.
        # `portal_url`: the portal as the gateway reaches it, to wake what the policy stopped.
        wake_url = portal_url.rstrip("/") + WAKE_PATH if portal_url else None
        self.gateway = LocalGateway(self.root, seed=key_seed, wake_url=wake_url) if gateway else None

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
                    key_seed=settings.SECRET_KEY,
                    gateway=settings.LOCAL_GATEWAY,
                    portal_url=settings.LOCAL_GATEWAY_PORTAL_URL,
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
        """What the running engine must match: its config, and whether it checks keys. Not the
        keys: the engine re-reads them from its key file (`refresh_keys`), so minting or revoking
        one never restarts it, and its port, in the endpoint URL users copied, stays."""
        checks = {"key_check": True} if self._checks_keys() else {}
        behind = {"gateway": True} if self.gateway else {}
        return digest({"engine": self.engine.kind, "config": self.engine.config(spec), **checks, **behind})

    def _checks_keys(self) -> bool:
        """Only vLLM's server checks keys itself (the Ray app has no `--middleware`)."""
        return self.engine.kind == "vllm" and bool(self.key_seed)

    def api_keys(self, spec: DeploymentSpec) -> list[str]:
        """The keys the engine accepts (see `_keys`)."""
        return self._keys(spec.tenant_slug, spec.deployment_id)

    def _keys(self, tenant_slug: str, deployment_id: int) -> list[str]:
        """The portal's Try-it key and the tenant's kept keys for this deployment
        (runtime.backends.local.keys); behind the gateway, only the gateway's upstream key (the
        gateway checks the others); none when the engine checks no keys."""
        if not self._checks_keys():
            return []
        if self.gateway:
            return [upstream_key(self.key_seed, deployment_id)]
        return [portal_key(self.key_seed, deployment_id), *keys_for(self.root, tenant_slug, deployment_id)]

    def refresh_routes(self) -> bool:
        """Rewrite the gateway's routing table from the files (keys, engines, deployments asleep);
        False without the gateway."""
        if self.gateway:
            self._write_routes()
        return bool(self.gateway)

    def refresh_keys(self, *, tenant_slug: str, deployment_id: int) -> bool:
        """Hand a running engine its current keys after a mint, a revocation or an expiry: its key
        file is rewritten (atomically, 0600) and `EngineKeyCheck` reads it on the next request; no
        restart. Under the deployment's lock, so a start that read the key store before the change
        cannot write the old set after this. True when an engine was there to tell (one that is
        not running reads its keys when it starts). Behind the gateway, only the routing file is
        rewritten: the engines' keys (the gateway's own) never change."""
        if self.gateway:
            self._write_routes()
            return self.load_state(deployment_id) is not None
        if not self._checks_keys():
            return False
        with self._deployment_lock(deployment_id):
            if self.load_state(deployment_id) is None:
                return False
            write_engine_keys(self.run_dir(deployment_id), self._keys(tenant_slug, deployment_id))
            return True

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
            previous = state.ports if state is not None else None
            events: list[tuple[str, str, str]] = []
            if state is not None and state.spec_hash != want:
                self._stop(state)
                events.append(("Normal", "Updated", f"Restarting the local engine for generation {spec.generation}."))
                state = None
            elif state is not None and state.boot_id != boot_id():
                state = None  # stopped by a reboot, not by a fault
            if state is None:
                # The ports it had (its endpoint URL), unless another process took one meanwhile.
                if self.gateway:  # the engine's ports are the gateway's business: no URL of users' moves
                    owner = ENGINE_OWNER.format(spec.deployment_id)
                    ports, moved_from = self.ports.assign(owner, self.engine.port_count)[0], None
                else:
                    ports, moved_from = self.ports.assign(spec.deployment_id, self.engine.port_count, previous=previous)
                state = self._start(spec, want, ports)
                if not events:
                    events.append(("Normal", "Created", f"Local {self.engine.kind} engine started (pid {state.pid})."))
                if moved_from:
                    events.append(("Warning", "EndpointMoved", _moved_message(self.engine, moved_from, ports)))
            elif self._checks_keys():
                # Level-triggered: whatever a lost refresh_keys missed, the next reconcile hands over.
                write_engine_keys(self.run_dir(spec.deployment_id), self.api_keys(spec))
            if self.gateway:
                self.gateway.awake(spec.deployment_id)
                self._write_routes()
                self.gateway.ensure_running(self._write_routes)
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
            if self.gateway:
                asleep = spec.wakeable and bool(self.gateway.wake_url)
                if asleep:  # its ports stay, its name is listed: a request wakes it (deployments.wake)
                    self.gateway.sleep(spec.deployment_id, spec.tenant_slug, spec.served_model_name)
                else:
                    self.gateway.awake(spec.deployment_id)
                self._write_routes()  # else the gateway closes its port; the port stays assigned to it
                if asleep:
                    self.gateway.ensure_running(self._write_routes)
            return True

    def stop_all(self) -> int:
        """Stop every engine recorded under the runtime dir, and the gateway (the demo's shutdown);
        returns how many engines."""
        (self.gateway or LocalGateway(self.root)).stop()
        stopped = 0
        for path in sorted(self.root.glob(f"*/{STATE_FILE}")):
            if path.parent.name.isdigit():
                state = self.load_state(int(path.parent.name))
                if state is not None:
                    with self._deployment_lock(state.deployment_id):
                        self._stop(state)
                    stopped += 1
        return stopped

    def tenant_endpoint(self, tenant_slug: str) -> str | None:
        """The tenant's OpenAI base URL on the local gateway (routes by `model`; stable for good,
        served while one of its deployments runs); None without the gateway."""
        return self.gateway.tenant_endpoint(tenant_slug) if self.gateway else None

    def share(self, shares: dict[str, dict[int, Any]]) -> bool:
        """Hand the gateway the portal's active subscriptions (consumer slug -> deployment id ->
        routes.Limits) and rewrite its table when they changed; False without the gateway."""
        if not self.gateway:
            return False
        if self.gateway.write_shares(shares):
            self._write_routes()
        return True

    def _engines(self) -> list[EngineState]:
        paths = sorted(self.root.glob(f"*/{STATE_FILE}"))
        found = (self.load_state(int(path.parent.name)) for path in paths if path.parent.name.isdigit())
        return [state for state in found if state is not None]

    def _write_routes(self) -> None:
        """Hand the gateway the current engines and keys (runtime.backends.local.gateway)."""
        assert self.gateway is not None
        self.gateway.write(self._engines(), lambda state: self.engine.urls(state.ports)[0].removesuffix("/v1"))

    def list_owned(self, namespace: str) -> dict[int, dict[str, Any]]:
        """Every engine recorded under the runtime dir for `namespace`, by deployment id."""
        owned: dict[int, dict[str, Any]] = {}
        for path in sorted(self.root.glob(f"*/{STATE_FILE}")):
            state = self.load_state(int(path.parent.name)) if path.parent.name.isdigit() else None
            if state is not None and state.namespace == namespace:
                owned[state.deployment_id] = {**asdict(state), "alive": self._alive(state)}
        return owned

    # --- operating visibility -----------------------------------------------------------------

    def events(self, spec: DeploymentSpec) -> list[dict[str, Any]]:
        """No Kubernetes here: the portal's own timeline is the whole story."""
        return []

    def logs(self, spec: DeploymentSpec, *, lines=None, max_bytes=None, secrets=()) -> list[dict[str, Any]]:
        """The engine log's tail (bounded, redacted, the keys this engine takes among the values
        removed wherever they stand); empty when no engine ran."""
        log_path = self.run_dir(spec.deployment_id) / LOG_FILE
        if not log_path.exists():
            return []
        secrets = (*secrets, *self.api_keys(spec))
        return engine_logs(log_path, self.engine.kind, lines=lines, max_bytes=max_bytes, secrets=secrets)

    def startup(self, spec: DeploymentSpec) -> dict[str, Any]:
        """This run's startup markers (spawn time, engine log markers, the Ray ready file)."""
        state = self.load_state(spec.deployment_id)
        if state is None:
            return {"markers": {}, "events": []}
        ready_file = self.run_dir(spec.deployment_id) / READY_FILE if self.engine.kind == "ray" else None
        return {"markers": engine_markers(Path(state.log_path), state.started_at, ready_file), "events": []}

    # --- internals ------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return engine_environment(os.environ, kvcache_gib=self.kvcache_gib, threads=self.threads)

    def _start(self, spec: DeploymentSpec, spec_hash: str, ports: list[int]) -> EngineState:
        run_dir = self.run_dir(spec.deployment_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / READY_FILE).unlink(missing_ok=True)
        argv = self.engine.argv(self.python, self.engine.config(spec), ports, run_dir)
        env = self._env()
        keys = self.api_keys(spec)
        if keys:  # never an argument: vLLM logs its arguments, and members read the log (keys.py)
            argv += ["--middleware", ENGINE_KEY_CHECK]
            env[ENGINE_KEYS_ENV] = str(write_engine_keys(run_dir, keys))
        log_path = run_dir / LOG_FILE
        with open(log_path, "a") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n")
        process = spawn(argv, env, log_path, cwd=run_dir)
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
            tenant_slug=spec.tenant_slug,
            model=spec.served_model_name,
        )
        self._save_state(state)
        return state

    def _stop(self, state: EngineState) -> None:
        terminate_session(state.pid, state.start_time, self.stop_timeout)
        child = self._children.pop(state.pid, None)
        if child is not None:
            child.wait(timeout=5)
        (self.run_dir(state.deployment_id) / STATE_FILE).unlink(missing_ok=True)

    def _observe(self, spec: DeploymentSpec, state: EngineState) -> Observation:
        endpoint, metrics = self.engine.urls(state.ports)
        public = self.gateway.deployment_port(state.deployment_id) if self.gateway else None
        if public is not None:
            endpoint = self.gateway.deployment_endpoint(state.deployment_id)
        converged = state.spec_hash == self.spec_hash(spec)
        run_dir = self.run_dir(spec.deployment_id)
        if not self._alive(state):
            child = self._children.get(state.pid)
            code = None
            if child is not None:
                # Dead, but the waiter thread may hold Popen's lock between reaping the process
                # and recording its code (a CI run saw "exited" without the code): wait for it.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = child.wait(timeout=2)
            tail = log_tail(Path(state.log_path))
            exited = "exited" if code is None else f"exited with code {code}"
            return _failed("EngineExited", f"The local engine {exited}.\n{tail}".strip(), converged=converged)
        if self.engine.ready(state.ports, run_dir) and (public is None or port_open(public)):
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
        obs.conditions = standard_conditions(
            ready=(state_name == "ready", reason, message),
            admitted=(True, "Local", "The local backend has no queue."),
            progressing=(
                state_name != "ready" or not converged,
                "Starting" if state_name != "ready" else ("Updating" if not converged else "Stable"),
                "",
            ),
            degraded=(False, "Healthy", ""),
        )
        return obs


def _moved_message(engine: Engine, old: list[int], new: list[int]) -> str:
    """Which of the engine's URLs (endpoint, metrics) moved, old and new."""
    before, after = engine.urls(old + new[len(old) :]), engine.urls(new)
    moved = "; ".join(f"{b} is now {a}" for b, a in zip(before, after, strict=True) if b != a)
    clients = " Snippets and clients that use the old endpoint URL must change." if before[0] != after[0] else ""
    return f"Another process listens on a port this deployment had, so the local engine moved: {moved}.{clients}"


def _failed(reason: str, message: str, *, converged: bool = True) -> Observation:
    return Observation(
        exists=True,
        state="failed",
        reason=reason,
        message=message,
        converged=converged,
        conditions=standard_conditions(
            ready=(False, reason, message),
            admitted=(True, "Local", ""),
            progressing=(False, reason, ""),
            degraded=(True, reason, message),
        ),
    )
