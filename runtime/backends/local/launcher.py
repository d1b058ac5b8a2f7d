"""The Ray launcher: `python -m runtime.backends.local.launcher ray-serve <serve_config.json> ...`.

Runs with the engine's interpreter, so it imports nothing of the portal (see
`runtime.backends`) and Ray only when run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import threading
from pathlib import Path

RAY_MIN_CPUS = 4  # Ray Serve LLM needs this many logical CPUs to place an LLM app


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
    parser = argparse.ArgumentParser(prog="python -m runtime.backends.local.launcher")
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
