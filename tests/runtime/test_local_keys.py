"""How the local engine gets its API keys: never as an argument, nor in a file an argument names
(vLLM reads `--config` files into its arguments and logs them), only through a 0600 file that
vLLM's own bearer check reads inside the engine (runtime.backends.local.keys.EngineKeyCheck).

A real process started by the backend's own spawn code, posing as vLLM (kind "vllm", so the
backend hands it keys); the real vLLM check is exercised in tests/runtime/test_local_engine.py.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from runtime.backends.local.backend import LocalBackend
from runtime.backends.local.keys import (
    ENGINE_KEY_CHECK,
    ENGINE_KEYS_ENV,
    EngineKeyCheck,
    read_engine_keys,
    store_key,
    write_engine_keys,
)
from runtime.backends.local.processes import session_members
from runtime.keys import portal_key
from tests.runtime.test_local import make_spec
from tests.runtime.test_local_insight import ChattyEngine
from tests.support.processes import wait_for

MINTED = "llmp_" + "k3y" * 14 + "z"
OTHER_TENANT = "llmp_" + "n0t" * 14 + "x"
# Like vLLM, it reads a `--config` file into its arguments and prints them; then, carelessly, it
# prints the keys it loaded from its key file; then it serves /health.
STANDIN = """
import functools, http.server, json, os, pathlib, sys
args = sys.argv[3:]
if "--config" in args:
    args += pathlib.Path(args[args.index("--config") + 1]).read_text().split()
print("non-default args:", args, flush=True)
if os.environ.get("LLM_PORTAL_ENGINE_KEYS_FILE"):
    print("loaded keys:", json.loads(pathlib.Path(os.environ["LLM_PORTAL_ENGINE_KEYS_FILE"]).read_text()), flush=True)
www = pathlib.Path(sys.argv[2]); www.mkdir(exist_ok=True); (www / "health").write_text("ok")
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
"""


class VllmStandIn(ChattyEngine):
    kind = "vllm"  # what makes the backend give it keys
    script = STANDIN


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_text().split("\0")
    return dict(item.split("=", 1) for item in raw if "=" in item)


def argv_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1]


@pytest.fixture
def engine(tmp_path):
    """A started stand-in with the portal's key and one minted key (another tenant has one too)."""
    root = tmp_path / "runtime"
    store_key(root, tenant_slug="team-a", key_id=1, deployment_id=None, api_key=MINTED)
    store_key(root, tenant_slug="team-b", key_id=2, deployment_id=None, api_key=OTHER_TENANT)
    backend = LocalBackend(root, engine=VllmStandIn(), stop_timeout=5, model_root=Path("/models"), key_seed="seed")
    spec = make_spec()
    backend.ensure(spec)
    wait_for(lambda: backend.observe(spec).state == "ready", timeout=30, what="the stand-in to serve")
    yield backend, spec, [portal_key("seed", spec.deployment_id), MINTED]
    backend.remove(spec)


class TestTheEngineGetsItsKeys:
    def test_no_argument_and_no_file_an_argument_names_holds_a_key(self, engine):
        backend, spec, keys = engine
        pid = backend.load_state(spec.deployment_id).pid

        for member in [pid, *session_members(pid)]:
            argv = argv_of(member)
            assert not [key for key in keys if any(key in arg for arg in argv)]
            named = [Path(arg) for arg in argv if arg.startswith("/") and Path(arg).is_file()]
            assert not [path for path in named if any(key.encode() in path.read_bytes() for key in keys)], named
        assert argv_of(pid)[-2:] == ["--middleware", ENGINE_KEY_CHECK]

    def test_they_come_from_a_private_file_named_in_its_environment(self, engine):
        backend, spec, keys = engine
        path = Path(environ_of(backend.load_state(spec.deployment_id).pid)[ENGINE_KEYS_ENV])

        assert read_engine_keys(path) == keys  # this tenant's, not team-b's
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    def test_neither_the_portals_records_nor_the_log_members_read_show_one(self, engine):
        backend, spec, keys = engine
        state_file = backend.run_dir(spec.deployment_id) / "state.json"
        wait_for(lambda: "loaded keys" in Path(backend.load_state(7).log_path).read_text(), timeout=10, what="the dump")

        (tail,) = backend.logs(spec)

        assert "loaded keys" in tail["text"]
        assert not [key for key in keys if key in tail["text"] or key in state_file.read_text()]


class TestTheKeyFile:
    def test_it_round_trips_every_key(self, tmp_path):
        keys = ["llmp-try-abc", "llmp_x'y\"z", "k" * 200]
        assert read_engine_keys(write_engine_keys(tmp_path, keys)) == keys

    @pytest.mark.parametrize("content", [None, "", "not json", "{}", "[]", '["ok", 3]', '[""]'])
    def test_a_missing_or_broken_file_stops_the_engine_instead_of_serving_everyone(self, tmp_path, content):
        path = tmp_path / "engine-keys.json"
        if content is not None:
            path.write_text(content)
        with pytest.raises(ValueError, match="key file"):
            read_engine_keys(path)

    def test_the_check_refuses_to_be_built_without_its_file(self, monkeypatch):
        pytest.importorskip("vllm")  # built inside the engine only
        monkeypatch.delenv(ENGINE_KEYS_ENV, raising=False)
        with pytest.raises(ValueError, match=ENGINE_KEYS_ENV):
            EngineKeyCheck(app=None)
