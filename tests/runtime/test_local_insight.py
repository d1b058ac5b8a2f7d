"""The local backend's operating reads on a real (stand-in) engine process: its log tail,
bounded and redacted, and its startup markers from the state file and vLLM-style log lines."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runtime.backends.local.backend import LocalBackend
from runtime.backends.local.engine import http_ok
from runtime.redaction import REDACTED
from runtime.spec import DeploymentSpec
from tests.runtime.test_local import make_spec
from tests.support.processes import wait_for

# Prints what vLLM prints while it starts (its own line format, local time), a secret the way a
# careless config dump would, then serves /health like the engine.
STANDIN = """
import sys, time, pathlib, http.server, functools
def line(msg):
    print(f"(EngineCore_DP0 pid=1) INFO {time.strftime('%m-%d %H:%M:%S')} [x.py:1] {msg}", flush=True)
print("engine args: api_key='sk-standin-0123456789', HF_TOKEN=hf_standinstandin123", flush=True)
line("Starting to load model /models/tiny...")
line("Starting vLLM server on http://127.0.0.1:" + sys.argv[1])
www = pathlib.Path(sys.argv[2]); www.mkdir(exist_ok=True); (www / "health").write_text("ok")
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), handler).serve_forever()
"""


class ChattyEngine:
    """A stand-in engine: `script` run as `python -c script <port> <www>`, healthy once it serves."""

    kind = "standin"
    script = STANDIN
    required_modules = ("http.server",)
    port_count = 1

    def config(self, spec: DeploymentSpec) -> dict[str, Any]:
        return {"model": spec.served_model_name}

    def argv(self, python: str, config: dict[str, Any], ports: list[int], run_dir: Path) -> list[str]:
        return [python, "-c", self.script, str(ports[0]), str(run_dir / "www")]

    def ready(self, ports: list[int], run_dir: Path) -> bool:
        return http_ok(f"http://127.0.0.1:{ports[0]}/health")

    def urls(self, ports: list[int]) -> tuple[str, str]:
        return f"http://127.0.0.1:{ports[0]}/v1", f"http://127.0.0.1:{ports[0]}/metrics"


def test_a_local_engine_gives_its_markers_and_a_redacted_log(tmp_path):
    backend = LocalBackend(tmp_path / "runtime", engine=ChattyEngine(), stop_timeout=5, model_root=Path("/models"))
    spec = make_spec()
    assert backend.logs(spec) == [] and backend.startup(spec) == {"markers": {}, "events": []}
    before = datetime.now(UTC).replace(microsecond=0)
    try:
        backend.ensure(spec)
        wait_for(lambda: backend.observe(spec).state == "ready", timeout=30, what="the stand-in to serve")
        markers = backend.startup(spec)["markers"]
        assert list(markers) == ["process_started", "weights_loading", "engine_ready"]
        assert before <= markers["process_started"] <= markers["weights_loading"] <= markers["engine_ready"]
        (tail,) = backend.logs(spec, lines=20)
        assert tail["pod"] == "local-engine" and tail["container"] == "standin"
        assert "sk-standin-0123456789" not in tail["text"] and "hf_standinstandin123" not in tail["text"]
        assert REDACTED in tail["text"] and "Starting vLLM server" in tail["text"]
        assert backend.events(spec) == []
    finally:
        backend.remove(spec)
    assert backend.logs(spec) == []
