"""A local cluster for people (`scripts/cluster up|down|status`): the tests' control plane in a
fixed folder (var/cluster, or CLUSTER_DIR), with KWOK nodes for the demo's flavors, a claim for
the model cache in every tenant namespace the portal makes, and kubeconfigs at stable paths.

`up` stays in the foreground until Ctrl-C or SIGTERM (`down`) and then stops everything; its pid
is in `<folder>/pid`, and `<folder>/cluster.json` records the API server's URL, the kubeconfigs
and the pid of every process it started.

Nodes carry the labels the portal renders for each flavor's ResourceFlavor (the CPU flavor's for
Ray heads; GPU flavors' tainted `nvidia.com/gpu`, as the tests' nodes are), so what Kueue admits
to a flavor is scheduled on that flavor's nodes. They are computed with the portal's own
renderers, so the settings that shape them (KUEUE_CPU_FLAVOR, KUEUE_CPU_NODE_LABELS,
MODEL_CACHE_PVC) must be the portal's: the defaults are.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from tests.support.shared import PROJECT_ROOT

FOLDER = Path(os.environ.get("CLUSTER_DIR") or PROJECT_ROOT / "var" / "cluster")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOKEN_SECONDS = 30 * 86400  # the portal's ServiceAccount token: a month of running
FOLLOW_GPUS = 8  # GPUs per node for a flavor met on the cluster (its ResourceFlavor has no count)


@dataclass(frozen=True)
class NodePool:
    flavor: str
    labels: dict[str, str]
    gpus: int  # per node; 0: the CPU flavor's node, untainted
    count: int = 1


# --- what the portal renders --------------------------------------------------------------


def _django() -> None:
    """Load the portal's settings: only its renderers and unsaved models are used, never the
    database. Under a DATABASE_URL the settings want a SECRET_KEY; this process signs nothing."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    if os.environ.get("DATABASE_URL"):
        os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    import django

    django.setup()


def demo_pools() -> list[NodePool]:
    """One CPU node for Ray heads and, per GPU flavor of `manage.py demo`, enough nodes for the
    demo tenants' nominal quotas of it, labelled as the portal renders the flavor."""
    _django()
    from portal.management.commands.demo import FLAVORS, TENANTS
    from quotas.models import GpuFlavor
    from quotas.specs import flavor_spec
    from runtime.manifests.kueue import render_cpu_resource_flavor, render_resource_flavor
    from runtime.platform import platform_spec

    cpu = render_cpu_resource_flavor(platform_spec())
    pools = [NodePool(cpu["metadata"]["name"], cpu["spec"]["nodeLabels"], 0)]
    for values in FLAVORS:
        if values["accelerator_type"] == "CPU":  # cpu-local: the local backend, on this machine
            continue
        flavor = GpuFlavor(**values)
        nominal = sum(quotas.get(flavor.name, (0, 0))[0] for _, _, quotas, _ in TENANTS)
        count = max(1, math.ceil(nominal / flavor.gpus_per_node))
        labels = render_resource_flavor(flavor_spec(flavor))["spec"]["nodeLabels"]
        pools.append(NodePool(flavor.name, labels, flavor.gpus_per_node, count))
    return pools


def _portal_settings() -> tuple[str, str | None]:
    """(the CPU flavor's name, the model-cache claim or None), as the portal has them."""
    from runtime.platform import platform_spec

    platform = platform_spec()
    return platform.cpu_flavor, platform.model_cache_pvc


# --- objects on the plane -----------------------------------------------------------------


def _get(plane, path: str) -> dict | None:
    try:
        return plane.request("GET", path)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def _create(plane, path: str, body: dict) -> None:
    try:
        plane.request("POST", path, body)
    except urllib.error.HTTPError as error:
        if error.code != 409:  # already there: a second pass of the loop
            raise


class Nodes:
    """KWOK nodes, each with its own /26 of the run's pod range (network.py)."""

    def __init__(self, plane) -> None:
        self.plane = plane
        self.count = 0
        self.flavors: set[str] = set()

    def add(self, pool: NodePool) -> list[str]:
        names = []
        for i in range(pool.count):
            name = f"kwok-{pool.flavor}-{i}"[:63].rstrip("-")
            capacity = {"cpu": "256", "memory": "4Ti", "pods": "110"}
            if pool.gpus:
                capacity["nvidia.com/gpu"] = str(pool.gpus)
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {"type": "kwok", "kubernetes.io/hostname": name, **pool.labels},
                },
                "spec": {"podCIDR": self.plane.net.node_cidr(self.count), "taints": [GPU_TAINT] if pool.gpus else []},
                "status": {"capacity": capacity, "allocatable": capacity},
            }
            self.count += 1
            _create(self.plane, "/api/v1/nodes", node)
            names.append(name)
        self.flavors.add(pool.flavor)
        return names

    def ready(self, names: list[str]) -> bool:
        for name in names:
            node = _get(self.plane, f"/api/v1/nodes/{name}") or {}
            conditions = (node.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return False
        return True


def provision_claims(plane, claim: str) -> list[str]:
    """A PersistentVolume for the claim `claim` in every tenant namespace the portal made (labelled
    as runtime.manifests.kueue.render_namespace labels them) whose claim is not bound yet: what a
    storage provisioner does on a real cluster. The portal's Kueue sync creates the claim
    (quotas.model_cache); where it has not yet, the claim is made here. Returns the namespaces served."""
    from runtime.manifests.common import LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY

    selector = urllib.parse.quote(f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_TENANT}")
    served = []
    for ns in plane.request("GET", f"/api/v1/namespaces?labelSelector={selector}")["items"]:
        namespace = ns["metadata"]["name"]
        if ns["metadata"].get("deletionTimestamp"):
            continue
        existing = _get(plane, f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
        if existing and (existing.get("status") or {}).get("phase") == "Bound":
            continue
        volume = f"{namespace}-{claim}"[:63].rstrip("-")
        old = _get(plane, f"/api/v1/persistentvolumes/{volume}")
        if old and (old.get("status") or {}).get("phase") == "Released":  # the namespace was remade
            plane.request("DELETE", f"/api/v1/persistentvolumes/{volume}")
            old = None
        if old is not None and existing:
            continue  # the volume is there: the controller manager binds them
        if old is None:
            _create(
                plane,
                "/api/v1/persistentvolumes",
                {
                    "metadata": {"name": volume},
                    "spec": {
                        "capacity": {"storage": "1Pi"},  # the largest claim the portal makes
                        "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"],
                        "storageClassName": "",
                        "hostPath": {"path": f"/tmp/{volume}"},
                        "claimRef": {"namespace": namespace, "name": claim},
                    },
                },
            )
        if not existing:
            _create(
                plane,
                f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
                {
                    "metadata": {"name": claim},
                    "spec": {
                        "accessModes": ["ReadWriteMany"],
                        "storageClassName": "",
                        "volumeName": volume,
                        "resources": {"requests": {"storage": "100Gi"}},
                    },
                },
            )
        served.append(namespace)
    return served


def follow_flavors(plane, nodes: Nodes, cpu_flavor: str) -> list[str]:
    """One node for each flavor the portal mirrored to Kueue that has none yet (a flavor made in
    the UI): FOLLOW_GPUS GPUs, or none for the CPU flavor."""
    from runtime.manifests.common import LABEL_FLAVOR, LABEL_MANAGED_BY, MANAGED_BY

    selector = urllib.parse.quote(f"{LABEL_MANAGED_BY}={MANAGED_BY}")
    added = []
    for flavor in plane.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/resourceflavors?labelSelector={selector}")[
        "items"
    ]:
        labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
        name = labels.get(LABEL_FLAVOR)
        if not name or name in nodes.flavors:
            continue
        gpus = 0 if name == cpu_flavor else FOLLOW_GPUS
        added += nodes.add(NodePool(name, labels, gpus))
    return added


# --- the commands -------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie (exited, not yet reaped by its parent) does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def running_pid(folder: Path = FOLDER) -> int | None:
    """The pid of a live `up` for `folder`, or None."""
    try:
        pid = int((folder / "pid").read_text().strip())
    except (OSError, ValueError):
        return None
    if not _alive(pid):
        return None
    try:  # a reused pid is not ours
        if b"tests.support.controlplane" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
    except OSError:
        pass
    return pid


def _say(text: str = "") -> None:
    print(text, flush=True)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _private(plane) -> None:
    """The admin token and the keys to root alone; the portal's kubeconfig to the person who ran
    `sudo scripts/cluster up`, so the portal, run as them, reads it."""
    for path in [plane.kubeconfig, plane.dir / "tokens.csv", *(plane.dir / "pki").glob("*.key")]:
        path.chmod(0o600)
    portal = plane.dir / "portal.kubeconfig"
    portal.chmod(0o600)
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if uid and gid and uid.isdigit() and gid.isdigit():
        os.chown(portal, int(uid), int(gid))


def up(folder: Path = FOLDER, *, kserve: bool = False, follow: bool = False) -> int:
    if os.geteuid() != 0:
        _say(
            "scripts/cluster up needs root: the pods' network namespace is made with `ip netns`.\n"
            "Run: sudo --preserve-env=KUBEBUILDER_ASSETS scripts/cluster up"
        )
        return 2
    if pid := running_pid(folder):
        _say(f"A local cluster already runs from {folder} (pid {pid}): scripts/cluster status, or down.")
        return 1
    from tests.support.controlplane.binaries import K8S_DIR, Unavailable
    from tests.support.controlplane.identity import portal_identity
    from tests.support.controlplane.plane import ControlPlane, sweep_stale

    pools = demo_pools()
    cpu_flavor, claim = _portal_settings()
    sweep_stale()
    shutil.rmtree(folder, ignore_errors=True)  # a run's data: a new run starts empty
    folder.mkdir(parents=True)
    (folder / "pid").write_text(f"{os.getpid()}\n")
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    try:
        plane = ControlPlane(kserve=kserve, folder=folder)
    except Unavailable as error:
        _say(
            f"The control plane's binaries are missing: {error}.\n"
            f"They come from {K8S_DIR} (the shared folder beside the project; PORTAL_SHARED_DIR moves it),\n"
            "or from a folder named by KUBEBUILDER_ASSETS holding etcd, kube-apiserver, kube-controller-manager,\n"
            "kube-scheduler, kubectl, kwok, kueue, kuberay-operator, kserve-controller, karpenter-kwok and helm\n"
            "built as ../shared/k8s/BUILD.md says (docs/demo.md, 'A local cluster')."
        )
        (folder / "pid").unlink(missing_ok=True)
        return 2
    stop = threading.Event()
    code = 0
    try:
        _say(f"Starting the control plane in {folder} (logs: {folder}/*.log) …")
        plane.start()
        plane.portal_kubeconfig = portal_identity(plane, expiration_seconds=TOKEN_SECONDS)
        _private(plane)
        nodes = Nodes(plane)
        names = [name for pool in pools for name in nodes.add(pool)]
        from tests.support.controlplane.procs import wait_until

        wait_until(lambda: nodes.ready(names), timeout=60, what=f"nodes {names} Ready")
        info = {
            "pid": os.getpid(),
            "url": plane.url,
            "kubeconfig": str(plane.kubeconfig),
            "portal_kubeconfig": str(plane.portal_kubeconfig),
            "netns": plane.net.netns,
            "pids": {name: proc.pid for name, proc in plane.procs.items()},
            "nodes": names,
        }
        (folder / "cluster.json").write_text(json.dumps(info, indent=2))
        version = plane.request("GET", "/version").get("gitVersion", "?")
        _say(f"Local cluster ready: Kubernetes {version} at {plane.url}, Kueue, KubeRay{', KServe' if kserve else ''}.")
        _say(f"  nodes: {', '.join(names)} (KWOK)")
        _say(f"  admin kubeconfig:  {plane.kubeconfig}")
        _say(f"  portal kubeconfig: {plane.portal_kubeconfig} (the llm-portal ServiceAccount, the chart's RBAC)")
        _say("Point the portal at it (restart the portal after each `up`: the address and CA are new):")
        _say(f"  export KUBECONFIG={plane.portal_kubeconfig}")
        _say("Ctrl-C here, or scripts/cluster down, stops it.")
        threading.Thread(target=_watch, args=(plane, nodes, cpu_flavor, claim, follow, stop), daemon=True).start()
        while not stop.wait(1):
            for proc in plane.procs.values():
                if not proc.running():
                    tail = proc.log.read_text(errors="replace")[-2000:]
                    _say(f"{proc.name} exited ({proc.popen.returncode}); stopping. Its log ends:\n{tail}")
                    code = 1
                    stop.set()
    except KeyboardInterrupt:
        _say("Stopping the local cluster …")
    except Exception as error:  # noqa: BLE001 - said to the person, then everything stops
        _say(f"The local cluster failed: {error}")
        code = 1
    finally:
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, signal.SIG_IGN)  # a second Ctrl-C must not cut the stop short
        stop.set()
        plane.stop()
        shutil.rmtree(folder / "etcd", ignore_errors=True)
        (folder / "cluster.json").unlink(missing_ok=True)
        (folder / "pid").unlink(missing_ok=True)
        _say("Stopped.")
    return code


def _watch(plane, nodes: Nodes, cpu_flavor: str, claim: str | None, follow: bool, stop: threading.Event) -> None:
    """Every 2 s: a model-cache claim in each new tenant namespace; with `follow`, a node for
    each new flavor."""
    said = ""
    while not stop.wait(2):
        try:
            for namespace in provision_claims(plane, claim) if claim else ():
                _say(f"  model cache: claim {claim} in namespace {namespace}")
            for name in follow_flavors(plane, nodes, cpu_flavor) if follow else ():
                _say(f"  node {name} for a flavor the portal added")
            said = ""
        except Exception as error:  # noqa: BLE001 - the API server may be stopping; say it once
            if str(error) != said:
                said = str(error)
                print(f"  (watching the cluster: {error})", file=sys.stderr, flush=True)


def down(folder: Path = FOLDER, *, timeout: float = 120) -> int:
    pid = running_pid(folder)
    if pid is None:
        _say(f"No local cluster runs from {folder}.")
        return 0
    try:
        os.kill(pid, signal.SIGTERM)
    except PermissionError:
        _say(f"The local cluster (pid {pid}) belongs to another user: sudo scripts/cluster down")
        return 2
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.25)
    if _alive(pid):  # its children die with it (procs.py); the sweep removes its network
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        from tests.support.controlplane.plane import sweep_stale

        sweep_stale()
        _say(f"The local cluster (pid {pid}) did not stop in {timeout:.0f} s: killed.")
        return 1
    _say(f"The local cluster (pid {pid}) stopped.")
    return 0


def status(folder: Path = FOLDER) -> int:
    pid = running_pid(folder)
    if pid is None:
        _say(f"No local cluster runs from {folder}. Start one: sudo scripts/cluster up")
        return 3
    try:
        info = json.loads((folder / "cluster.json").read_text())
    except (OSError, ValueError):
        _say(f"The local cluster (pid {pid}) is starting; see {folder}/*.log.")
        return 4
    _say(f"The local cluster runs (pid {pid}) at {info['url']}.")
    _say(f"  admin kubeconfig:  {info['kubeconfig']}")
    _say(f"  portal kubeconfig: {info['portal_kubeconfig']}")
    _say(f"  export KUBECONFIG={info['portal_kubeconfig']}")
    return 0
