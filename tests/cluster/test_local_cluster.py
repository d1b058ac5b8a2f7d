"""`scripts/cluster` (issue 38): `up` starts the tests' control plane for people and prints the
kubeconfig to export; the portal's ServiceAccount reaches Kueue through it, the demo flavors'
KWOK nodes are Ready, a tenant namespace gets its model-cache claim; `status` says so; `down`
stops it and no process of that run, nor its network namespace, is left."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import threading
import time
from pathlib import Path

from runtime import k8s
from runtime.k8s.kinds import CRD
from runtime.manifests.common import portal_labels
from tests.support.controlplane.fixtures import _unavailable
from tests.support.shared import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "cluster"
READY_SECONDS = 300  # about 20 s alone; much more on 2 busy cores beside a test session's plane


def _available() -> None:
    from tests.support.controlplane.binaries import Unavailable, binaries

    if os.geteuid() != 0:
        _unavailable("the pod network namespace needs root (ip netns)")
    try:
        binaries()
    except Unavailable as error:
        _unavailable(str(error))


def _lines(proc: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def read():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _wait_for_export(lines: queue.Queue, seen: list[str]) -> Path:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            raise AssertionError("scripts/cluster up exited:\n" + "".join(seen))
        seen.append(line)
        if match := re.match(r"\s*export KUBECONFIG=(\S+)", line):
            return Path(match[1])
    raise AssertionError(f"no kubeconfig after {READY_SECONDS} s:\n" + "".join(seen))


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_scripts_cluster_up_serves_the_portal_and_down_leaves_nothing(tmp_path):
    _available()
    folder = tmp_path / "cluster"
    env = {**os.environ, "CLUSTER_DIR": str(folder)}
    run = lambda *args: subprocess.run(  # noqa: E731
        [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=180
    )
    up = subprocess.Popen(
        [str(SCRIPT), "up"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    seen: list[str] = []
    info: dict = {}
    try:
        lines = _lines(up)
        kubeconfig = _wait_for_export(lines, seen)
        assert kubeconfig == folder / "portal.kubeconfig"  # a stable path people can export
        info = json.loads((folder / "cluster.json").read_text())
        assert info["pid"] == up.pid  # scripts/cluster execs the module: `down` signals this process
        assert {"etcd", "kube-apiserver", "kueue", "kuberay", "kwok", "rayhead"} <= set(info["pids"])

        admin = k8s.Cluster.for_kubeconfig(str(folder / "kubeconfig"), timeout=30)
        nodes = {n["metadata"]["name"]: n for n in admin.list(k8s.NODE)}
        assert set(info["nodes"]) == set(nodes)
        for node in nodes.values():
            ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True", node["metadata"]["name"]
        flavors = {n["metadata"]["labels"]["llm-portal.io/flavor"] for n in nodes.values()}
        assert flavors == {"portal-cpu", "h100-sxm5", "a100-pcie", "l4"}  # the demo's, heads' CPU flavor
        crds = {c["metadata"]["name"] for c in admin.list(CRD)}
        assert {"workloads.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "rayservices.ray.io"} <= crds

        # The portal's own identity reads Kueue through the exported kubeconfig.
        portal = k8s.Cluster.for_kubeconfig(str(kubeconfig), timeout=30)
        assert portal.list(k8s.WORKLOAD) == [] and portal.get(k8s.CLUSTERQUEUE, "nobody") is None

        # A tenant namespace as the portal makes it gets the model-cache claim, bound.
        admin.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t-one", "labels": portal_labels("one")}}
        )
        claim = _wait(lambda: admin.get(k8s.PVC, "model-cache", "t-one"), 30, "the model-cache claim")
        _wait(
            lambda: (admin.get(k8s.PVC, "model-cache", "t-one") or {}).get("status", {}).get("phase") == "Bound",
            30,
            "the claim Bound",
        )
        assert claim["spec"]["storageClassName"] == ""

        status = run("status")
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"export KUBECONFIG={kubeconfig}" in status.stdout

        down = run("down")
        assert down.returncode == 0, down.stdout + down.stderr
        assert up.wait(30) == 0, "".join(seen)
    finally:
        if up.poll() is None:
            run("down")
            up.wait(60)
    for name, pid in info["pids"].items():
        assert not _running(pid), f"{name} (pid {pid}) still runs"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert info["netns"] not in netns.split()
    assert not (folder / "pid").exists() and not (folder / "cluster.json").exists()
    assert run("status").returncode == 3
