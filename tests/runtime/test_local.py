"""The local backend's process management, without the engine (runs where vllm is absent).

Real processes throughout: the "engine" in the lifecycle tests is a stand-in, Python's
`http.server` serving a `health` file (so GET /health answers 200 as vLLM's does), started by
the very same spawn / state-file / session-kill code that starts vLLM. The stand-in also starts a
grandchild in a process group of its own, the way Ray starts its actors, so `remove` is shown to
leave no orphan behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from runtime.backends.local.backend import ENGINE_NOT_INSTALLED, LocalBackend
from runtime.backends.local.engine import (
    RayServeApp,
    VllmServer,
    http_ok,
    local_llm_config,
    local_serve_config,
    vllm_server_args,
)
from runtime.backends.local.ports import PortAllocator
from runtime.manifests.rayservice import llm_config
from runtime.spec import DeploymentSpec, EngineOptions, FlavorSpec
from tests.support.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
CPU = FlavorSpec(name="cpu", gpu_model="CPU", accelerator_type="", gpu_memory_gib=0, gpus_per_node=1)
STANDIN = textwrap.dedent("""
    import pathlib, runpy, subprocess, sys
    port, www = sys.argv[1], sys.argv[2]
    # Like a Ray actor: same session, own process group.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], process_group=0)
    pathlib.Path(www, "..", "grandchild.pid").write_text(str(child.pid))
    sys.argv = ["http.server", port, "--bind", "127.0.0.1", "--directory", www]
    runpy.run_module("http.server", run_name="__main__")
""")


def make_spec(deployment_id: int = 7, **changes: Any) -> DeploymentSpec:
    values: dict[str, Any] = dict(
        deployment_id=deployment_id,
        name="tiny",
        namespace="team-a",
        tenant_slug="team-a",
        queue_name="lq",
        model_source="/models/tiny",
        served_model_name="tiny",
        flavor=CPU,
        backend="local",
    )
    return DeploymentSpec(**{**values, **changes})


class StandInEngine:
    """http.server posing as the engine; `fail` makes it print an engine-like error and exit."""

    kind = "standin"
    required_modules = ("http.server",)
    port_count = 1

    def __init__(self, fail: bool = False):
        self.fail = fail

    def config(self, spec: DeploymentSpec) -> dict[str, Any]:
        return {"model": spec.served_model_name}

    def argv(self, python: str, config: dict[str, Any], ports: list[int], run_dir: Path) -> list[str]:
        if self.fail:
            return [python, "-c", "import sys; print('ValueError: head_dim 16 is not supported'); sys.exit(3)"]
        www = run_dir / "www"
        www.mkdir(exist_ok=True)
        (www / "health").write_text("ok")
        return [python, "-c", STANDIN, str(ports[0]), str(www)]

    def ready(self, ports: list[int], run_dir: Path) -> bool:
        return http_ok(f"http://127.0.0.1:{ports[0]}/health")

    def urls(self, ports: list[int]) -> tuple[str, str]:
        return f"http://127.0.0.1:{ports[0]}/v1", f"http://127.0.0.1:{ports[0]}/metrics"


def gone(pid: int) -> bool:
    """No such process, or only its zombie (exited, waiting for a parent to collect it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


@pytest.fixture
def backends(tmp_path):
    """Backends made during a test; whatever they left running is stopped afterwards."""
    made: list[LocalBackend] = []

    def make(**kwargs: Any) -> LocalBackend:
        kwargs.setdefault("model_root", Path("/models"))  # make_spec's /models/tiny is inside
        backend = LocalBackend(tmp_path / "runtime", stop_timeout=5, **kwargs)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        for deployment_id in backend.list_owned("team-a"):
            backend.remove(make_spec(deployment_id))


class TestEngineNotInstalled:
    def test_it_fails_with_an_install_hint_when_the_engine_interpreter_lacks_vllm(self, tmp_path, backends):
        # A fresh virtual environment: a real interpreter where `vllm` cannot be found.
        venv.create(tmp_path / "bare", with_pip=False)
        backend = backends(python=str(tmp_path / "bare" / "bin" / "python"))

        obs = backend.ensure(make_spec())

        assert (obs.state, obs.reason, obs.message) == ("failed", "EngineNotInstalled", ENGINE_NOT_INSTALLED)
        assert backend.load_state(7) is None  # nothing was started

    def test_importing_the_backend_loads_no_engine(self):
        code = "import runtime.backends.local.backend, sys; print(sorted({'vllm', 'ray', 'torch'} & set(sys.modules)))"
        result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
        assert result.stdout.strip() == "[]"


class TestPortAllocation:
    def test_concurrent_allocations_from_threads_and_processes_never_collide(self, tmp_path):
        root = tmp_path / "runtime"
        code = (
            "import sys; from pathlib import Path; from runtime.backends.local.ports import PortAllocator; "
            "a = PortAllocator(Path(sys.argv[1])); print(*[p for _ in range(25) for p in a.allocate(2)])"
        )
        procs = [
            subprocess.Popen([sys.executable, "-c", code, str(root)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
            for _ in range(3)
        ]
        with ThreadPoolExecutor(max_workers=8) as pool:
            in_threads = list(pool.map(lambda _: PortAllocator(root).allocate(2), range(100)))
        from_processes = [int(p) for proc in procs for p in proc.communicate(timeout=60)[0].split()]

        ports = [p for pair in in_threads for p in pair] + from_processes
        assert len(ports) == 2 * 100 + 3 * 50
        assert len(set(ports)) == len(ports)

    def test_ports_recorded_in_a_state_file_stay_taken_after_their_reservation_is_released(self, tmp_path):
        root = tmp_path / "runtime"
        allocator = PortAllocator(root)
        held = allocator.allocate(1)
        (root / "3").mkdir()
        (root / "3" / "state.json").write_text(json.dumps({"ports": held}))
        allocator.release(held)
        # Ask for many more ports than the kernel tends to cycle through: the held one never returns.
        assert not set(held) & {p for _ in range(200) for p in allocator.allocate(1)}


class TestLifecycle:
    def test_a_new_backend_finds_a_running_engine_through_its_state_file_and_removes_it_without_orphans(self, backends):
        spec = make_spec()
        first = backends(engine=StandInEngine())
        started = first.ensure(spec)
        assert (started.state, started.reason) == ("provisioning", "EngineStarting")  # not serving yet
        assert [e[1] for e in started.events] == ["Created"]
        state = first.load_state(spec.deployment_id)
        grandchild = int(wait_for(lambda: _read(first.run_dir(7) / "grandchild.pid")))

        # A restarted worker: a fresh instance that knows nothing but the state file.
        second = backends(engine=StandInEngine())
        obs = wait_for(lambda: (o := second.observe(spec)).state == "ready" and o)
        assert obs.endpoint_url == f"http://127.0.0.1:{state.ports[0]}/v1"
        assert obs.converged
        again = second.ensure(spec)
        assert (again.state, again.events) == ("ready", [])  # found, not started twice
        assert second.load_state(spec.deployment_id).pid == state.pid
        assert list(second.list_owned("team-a")) == [7] and second.list_owned("team-b") == {}

        assert second.remove(spec) is True

        assert gone(state.pid) and gone(grandchild)
        assert not second.run_dir(7).exists()
        assert second.observe(spec).exists is False
        assert not http_ok(f"http://127.0.0.1:{state.ports[0]}/health")

    def test_a_spec_change_replaces_the_engine_on_the_same_port(self, backends):
        backend = backends(engine=StandInEngine())
        old = backend.ensure(make_spec())
        old_pid = backend.load_state(7).pid
        wait_for(lambda: backend.observe(make_spec()).state == "ready")  # it answered: TIME_WAITs on its port

        new = backend.ensure(make_spec(served_model_name="tiny-v2", generation=2))

        assert [e[1] for e in new.events] == ["Updated"]
        assert backend.load_state(7).pid != old_pid and gone(old_pid)
        assert old.converged and new.converged
        assert new.endpoint_url == old.endpoint_url  # the URL users copied still reaches it

    def test_an_engine_that_exits_is_reported_failed_with_the_end_of_its_log(self, backends):
        backend = backends(engine=StandInEngine(fail=True))
        backend.ensure(make_spec())

        obs = wait_for(lambda: (o := backend.observe(make_spec())).state == "failed" and o)

        assert obs.reason == "EngineExited"
        assert "code 3" in obs.message and "head_dim 16 is not supported" in obs.message
        # Not restarted behind the reconciler's back: a broken engine would only crash again.
        assert backend.ensure(make_spec()).state == "failed"

    def test_a_backend_that_did_not_start_the_engine_still_sees_it_exit(self, backends):
        spec = make_spec()
        starter = backends(engine=StandInEngine())
        starter.ensure(spec)
        state = starter.load_state(7)
        wait_for(lambda: starter.observe(spec).state == "ready")
        subprocess.run(["kill", "-9", str(state.pid)], check=True)

        obs = wait_for(lambda: (o := backends(engine=StandInEngine()).observe(spec)).state == "failed" and o)
        assert obs.reason == "EngineExited"

    def test_an_engine_stopped_by_another_worker_process_does_not_linger_as_a_zombie(self, backends):
        # In a Celery pool, `remove` may run in a different worker process from the one that
        # started the engine; that process only signals it, and the starter (the parent) alone
        # can collect the exit. Signalled from outside here, the starter making no further call.
        spec = make_spec()
        starter = backends(engine=StandInEngine())
        starter.ensure(spec)
        wait_for(lambda: starter.observe(spec).state == "ready")
        pid = starter.load_state(7).pid
        subprocess.run(["kill", "-TERM", str(pid)], check=True)

        wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=10)  # reaped, not a zombie
        obs = starter.observe(spec)
        assert (obs.state, obs.reason) == ("failed", "EngineExited")
        assert "exited with code -15" in obs.message


class TestAppConfig:
    def test_the_local_app_is_the_cluster_app_adapted_only_for_a_cpu(self):
        spec = make_spec(
            flavor=FlavorSpec(
                name="h100", gpu_model="H100", accelerator_type="H100", gpu_memory_gib=80, gpus_per_node=8
            ),
            tensor_parallel_size=2,
            engine=EngineOptions(max_model_len=1024, dtype="bfloat16"),
        )
        cluster, local = llm_config(spec), local_llm_config(spec)

        assert cluster["accelerator_type"] == "H100" and "accelerator_type" not in local
        assert local["model_loading_config"] == cluster["model_loading_config"]
        assert local["placement_group_config"] == {"bundles": [{"CPU": 1}]}
        kept = {
            k: v
            for k, v in cluster["engine_kwargs"].items()
            if k not in ("gpu_memory_utilization", "tensor_parallel_size")
        }
        assert kept.items() <= local["engine_kwargs"].items()
        assert (local["engine_kwargs"]["tensor_parallel_size"], local["engine_kwargs"]["block_size"]) == (1, 32)
        app = local_serve_config(spec)["applications"][0]
        assert (app["import_path"], app["args"]["llm_configs"]) == ("ray.serve.llm:build_openai_app", [local])

    def test_engine_kwargs_become_server_flags(self):
        args = vllm_server_args(local_llm_config(make_spec(engine=EngineOptions(max_model_len=512))))

        assert args[:4] == ["--model", "/models/tiny", "--served-model-name", "tiny"]
        assert "--enable-chunked-prefill" in args and "--no-trust-remote-code" in args
        assert args[args.index("--max-model-len") + 1] == "512"
        assert args[args.index("--block-size") + 1] == "32"

    def test_both_engines_serve_an_openai_api_and_expose_metrics(self):
        assert VllmServer().urls([8100]) == ("http://127.0.0.1:8100/v1", "http://127.0.0.1:8100/metrics")
        assert RayServeApp().urls([8100, 8101]) == ("http://127.0.0.1:8100/v1", "http://127.0.0.1:8101/metrics")


def _read(path: Path) -> str | None:
    try:
        return path.read_text() or None
    except FileNotFoundError:
        return None


def test_instance_is_one_per_process(settings, tmp_path):
    settings.LOCAL_RUNTIME_DIR = tmp_path
    LocalBackend._instance = None
    try:
        results: list[LocalBackend] = []
        threads = [threading.Thread(target=lambda: results.append(LocalBackend.instance())) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({id(b) for b in results}) == 1 and results[0].root == tmp_path
    finally:
        LocalBackend._instance = None


def test_stop_all_stops_every_recorded_engine(backends):
    """The demo's shutdown: every engine recorded under the runtime dir is stopped (stand-in
    engines, so this runs without vLLM installed)."""
    backend = backends(engine=StandInEngine())
    pids = [backend.ensure(make_spec(deployment_id=i)) and backend.load_state(i).pid for i in (7, 8)]
    assert all(not gone(pid) for pid in pids)
    assert backend.stop_all() == 2
    wait_for(lambda: all(gone(pid) for pid in pids))


# --- what the engine may open ---------------------------------------------------------------------


@pytest.fixture
def model_root(tmp_path):
    """A model root with one model, a symlink out of it and a secret next to it."""
    root = tmp_path / "models"
    (root / "tiny").mkdir(parents=True)
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key").write_text("do not load me")
    (root / "evil").symlink_to(tmp_path / "secrets")
    return root


class TestModelSource:
    @pytest.mark.parametrize(
        "source",
        [
            "/etc",
            "/etc/passwd",
            "{root}/../secrets",
            "{root}/tiny/../../secrets",
            "{root}/evil",
            "{root}/evil/key",
            "{root}",
            "{root}-evil/tiny",
            "{root}/tiny\x00",
            "file://{root}/tiny",
            "~/tiny",
            "{root}\\..\\secrets",
            "../../secrets",
            "org/../../../secrets",
            "pvc://models/tiny",  # mounted at /models/models/tiny in a pod: outside this machine's root
        ],
    )
    def test_the_engine_is_never_started_on_a_path_outside_the_model_root(self, backends, model_root, source):
        backend = backends(engine=StandInEngine(), model_root=model_root)

        obs = backend.ensure(make_spec(model_source=source.format(root=model_root)))

        assert (obs.state, obs.reason) == ("failed", "ModelSourceRefused"), obs.message
        assert backend.load_state(7) is None  # nothing was started

    def test_without_a_model_root_no_local_path_is_opened(self, backends, model_root):
        obs = backends(engine=StandInEngine(), model_root=None).ensure(make_spec(model_source=f"{model_root}/tiny"))
        assert (obs.reason, obs.message) == (
            "ModelSourceRefused",
            "No model root is configured (LOCAL_MODEL_ROOT): local paths are refused.",
        )

    @pytest.mark.parametrize("source", ["{root}/tiny", "{root}/tiny/", "{root}/not-there-yet", "Qwen/Qwen2.5-0.5B"])
    def test_paths_under_the_root_and_hub_ids_start(self, backends, model_root, source):
        backend = backends(engine=StandInEngine(), model_root=model_root)
        obs = backend.ensure(make_spec(model_source=source.format(root=model_root)))
        assert (obs.state, obs.reason) == ("provisioning", "EngineStarting"), obs.message

    def test_the_root_is_compared_resolved_so_a_symlinked_root_still_works(self, backends, model_root, tmp_path):
        (tmp_path / "link-to-models").symlink_to(model_root)
        backend = backends(engine=StandInEngine(), model_root=tmp_path / "link-to-models")
        assert backend.ensure(make_spec(model_source=f"{model_root}/tiny")).state == "provisioning"

    def test_the_backend_built_from_settings_uses_local_model_root(self, settings, tmp_path):
        settings.LOCAL_RUNTIME_DIR, settings.LOCAL_MODEL_ROOT = tmp_path / "runtime", tmp_path / "models"
        LocalBackend._instance = None
        try:
            assert LocalBackend.instance().model_root == tmp_path / "models"
        finally:
            LocalBackend._instance = None


# --- what the engine may see ----------------------------------------------------------------------

PORTAL_SECRETS = {
    "SECRET_KEY": "django-secret",
    "DATABASE_URL": "postgres://portal:pw@db/portal",
    "CELERY_BROKER_URL": "redis://:pw@redis:6379/0",
    "CACHE_URL": "redis://:pw@redis:6379/1",
    "AWS_ACCESS_KEY_ID": "AKIA0000",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AWS_SESSION_TOKEN": "aws-session",
    "HF_TOKEN": "hf_portal",
    "HUGGING_FACE_HUB_TOKEN": "hf_portal_old",
    "METRICS_TOKEN": "metrics-bearer",
    "OIDC_RP_CLIENT_SECRET": "oidc-secret",
    "KUBECONFIG": "/home/portal/.kube/config",
    "GOOGLE_APPLICATION_CREDENTIALS": "/secrets/gcp.json",
    "AZURE_STORAGE_KEY": "azure",
    "VLLM_API_KEY": "would-lock-the-health-check",
    "RAY_REDIS_PASSWORD": "ray-secret",
    "SENTRY_DSN": "https://key@sentry/1",
    "DJANGO_SETTINGS_MODULE": "portal.settings",
    "SOMETHING_ELSE": "x",
}
ENGINE_NEEDS = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/portal",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TMPDIR": "/tmp",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "RAY_memory_monitor_refresh_ms": "0",
    "CUDA_VISIBLE_DEVICES": "",
    "HF_HOME": "/var/cache/hf",
    "PYTHONPATH": "/opt/extra",
}


class TestEngineEnvironment:
    def test_it_carries_what_the_engine_needs_and_none_of_the_portals_secrets(self):
        from runtime.backends.local.engine import PROJECT_ROOT, engine_environment

        env = engine_environment({**PORTAL_SECRETS, **ENGINE_NEEDS}, kvcache_gib=3, threads=2)

        assert not set(PORTAL_SECRETS) & set(env)
        assert not any(
            secret in value for value in env.values() for secret in PORTAL_SECRETS.values() if len(secret) > 1
        )
        assert {k: env[k] for k in ENGINE_NEEDS if k != "PYTHONPATH"} == {
            k: v for k, v in ENGINE_NEEDS.items() if k != "PYTHONPATH"
        }
        assert env["PYTHONPATH"] == f"{PROJECT_ROOT}:/opt/extra"  # the Ray launcher is runtime.backends.local.launcher
        assert (env["VLLM_CPU_KVCACHE_SPACE"], env["OMP_NUM_THREADS"], env["HF_HUB_OFFLINE"]) == ("3", "2", "1")

    def test_the_started_engine_process_sees_no_secret(self, backends, monkeypatch):
        for name, value in PORTAL_SECRETS.items():
            monkeypatch.setenv(name, value)
        backend = backends(engine=StandInEngine())

        backend.ensure(make_spec())

        pid = backend.load_state(7).pid
        environ = dict(
            item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item
        )
        assert not set(PORTAL_SECRETS) & set(environ), sorted(set(PORTAL_SECRETS) & set(environ))
        assert environ["PATH"] and environ["OMP_NUM_THREADS"] == "2" and environ["HF_HUB_OFFLINE"] == "1"
