"""`python -m tests.support.controlplane up [--kserve] [--nodes-from-portal] | down | status`:
the tests' control plane as a local cluster for people (local.py; `scripts/cluster` runs this)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.support.controlplane import local


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/cluster", description="A local cluster for the portal: the tests' control plane, kept running."
    )
    parser.add_argument("--dir", type=Path, default=local.FOLDER, help=f"work folder (default {local.FOLDER})")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("up", help="start the cluster and stay in the foreground (needs root)")
    start.add_argument("--kserve", action="store_true", help="also run the KServe controller (Standard mode)")
    start.add_argument(
        "--nodes-from-portal",
        action="store_true",
        help=f"also give each flavor the portal mirrors to Kueue a node ({local.FOLLOW_GPUS} GPUs) when it appears",
    )
    commands.add_parser("down", help="stop the running cluster")
    commands.add_parser("status", help="whether it runs, and its kubeconfigs (exit 3: not running)")
    args = parser.parse_args(argv)
    folder = args.dir.resolve()
    if args.command == "up":
        return local.up(folder, kserve=args.kserve, follow=args.nodes_from_portal)
    if args.command == "down":
        return local.down(folder)
    return local.status(folder)


if __name__ == "__main__":
    sys.exit(main())
