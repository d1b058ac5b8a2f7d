"""pytest fixtures for the real control plane (registered in tests/conftest.py).

`control_plane` starts one per test session (about 13 s) and stops it at the end. Tests that use
it get `kube`: an admin client plus helpers to add KWOK nodes, wait on objects and steer the
stand-in Ray head, which removes everything the test created afterwards, and points the portal's
settings at the plane as the `llm-portal` ServiceAccount bound to the Helm chart's rendered
ClusterRole (the real authorizer proves that grant is enough). Without the binaries, or without
root for the network namespace, the tests skip with the reason; with `CI` set they fail.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import time
import urllib.request
import warnings
from collections.abc import Iterator

import pytest

from runtime import k8s
from tests.support.controlplane import cleanup
from tests.support.controlplane.binaries import Unavailable
from tests.support.controlplane.identity import PORTAL_NAMESPACE, portal_identity

KUEUE_CLUSTER_KINDS = ("clusterqueues", "resourceflavors", "cohorts", "workloadpriorityclasses", "topologies")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
_node_numbers = itertools.count()


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"the real control plane cannot start: {reason} (CI is set, so this is an error, not a skip)")
    pytest.skip(f"the real control plane cannot start: {reason}")


@pytest.fixture(scope="session")
def control_plane():
    from tests.support.controlplane.plane import ControlPlane, sweep_stale

    if os.geteuid() != 0:
        _unavailable("the pod network namespace needs root (ip netns)")
    sweep_stale()
    try:
        plane = ControlPlane()
    except Unavailable as error:
        _unavailable(str(error))
    plane.start()
    try:
        plane.portal_kubeconfig = portal_identity(plane)
        yield plane
    finally:
        plane.stop()


class Kube:
    """What a test does to the real cluster beside the portal (as admin)."""

    def __init__(self, plane) -> None:
        self.plane = plane
        self.admin = k8s.Cluster.for_kubeconfig(str(plane.kubeconfig), timeout=30)
        self.nodes: list[str] = []
        self.volumes: list[str] = []

    # nodes

    def add_nodes(
        self, labels: dict[str, str], *, count: int = 1, gpus: int = 0, cpu: str = "96", memory: str = "1Ti", taints=()
    ) -> list[str]:
        names = []
        for _ in range(count):
            n = next(_node_numbers)
            name = f"kwok-{n}"
            capacity = {"cpu": cpu, "memory": memory, "pods": "110"}
            if gpus:
                capacity["nvidia.com/gpu"] = str(gpus)
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                    "labels": {"type": "kwok", "kubernetes.io/hostname": name, **labels},
                },
                "spec": {"podCIDR": self.plane.net.node_cidr(n), "taints": list(taints)},
                "status": {"capacity": capacity, "allocatable": capacity},
            }
            self.plane.request("POST", "/api/v1/nodes", node)
            names.append(name)
        self.nodes += names
        self.wait(lambda: all(self.node_ready(name) for name in names), what=f"nodes {names} Ready")
        return names

    def nodes_for_flavor(self, flavor: dict, *, count: int = 1, gpus: int = 8) -> list[str]:
        """Nodes carrying a rendered ResourceFlavor's nodeLabels; GPU nodes get the GPU taint."""
        labels = dict(flavor["spec"].get("nodeLabels") or {})
        return self.add_nodes(labels, count=count, gpus=gpus, taints=[GPU_TAINT] if gpus else ())

    def model_cache(self, namespace: str, claim: str) -> None:
        """A PersistentVolume for the tenant's model-cache claim, which the portal's Kueue sync
        creates (quotas.model_cache): no StorageClass here, so the volume has `storageClassName: ""`
        and a claimRef; the controller manager binds them in about a second. It holds the largest
        claim the portal makes, so any MODEL_CACHE_SIZE_GI fits."""
        volume = f"{namespace}-{claim}"[:63]
        self.plane.request(
            "POST",
            "/api/v1/persistentvolumes",
            {
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": "1Pi"},
                    "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany"],
                    "storageClassName": "",
                    "hostPath": {"path": f"/tmp/{volume}"},
                    "claimRef": {"namespace": namespace, "name": claim},
                },
            },
        )
        self.volumes.append(volume)

    def node_ready(self, name: str) -> bool:
        node = self.plane.request("GET", f"/api/v1/nodes/{name}")
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", []))

    # reading

    def get(self, kind: k8s.Kind, name: str, namespace: str | None = None) -> dict | None:
        return self.admin.get(kind, name, namespace)

    def list(self, kind: k8s.Kind, namespace: str | None = None) -> list[dict]:
        return self.admin.list(kind, namespace)

    def raw(self, path: str) -> dict:
        return self.plane.request("GET", path)

    def pods(self, namespace: str) -> list[dict]:
        return self.raw(f"/api/v1/namespaces/{namespace}/pods")["items"]

    def wait(self, predicate, *, timeout: float = 60, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.story()}")

    def story(self) -> str:
        """Logs' last lines, for a failing wait."""
        lines = []
        for name in ("kueue", "kuberay", "karpenter"):
            proc = self.plane.procs.get(name)
            if proc:
                lines.append(f"--- {name} ---\n" + "\n".join(proc.log.read_text(errors="replace").splitlines()[-25:]))
        return "\n".join(lines)

    # the stand-in Ray head

    def head_state(self, pod_ip: str) -> dict:
        with urllib.request.urlopen(f"http://{pod_ip}:8265/_standin/state", timeout=5) as resp:
            return json.loads(resp.read())

    def set_head_status(self, pod_ip: str, status: str, message: str = "") -> None:
        body = json.dumps({"status": status, "message": message}).encode()
        req = urllib.request.Request(f"http://{pod_ip}:8265/_standin/status", data=body, method="POST")
        urllib.request.urlopen(req, timeout=5).read()

    def set_head_metrics(self, pod_ip: str, fixture: str | None) -> None:
        """Every stand-in head serves `fixture` (a file of ../shared/fixtures/metrics) on :8080,
        or, with None, the exposition it started with (one server answers on every pod address)."""
        body = json.dumps({"fixture": fixture} if fixture else {}).encode()
        req = urllib.request.Request(f"http://{pod_ip}:8265/_standin/metrics", data=body, method="POST")
        urllib.request.urlopen(req, timeout=5).read()

    # cleanup

    def clean(self) -> None:
        """Delete what a test made: tenant namespaces with all they hold, queues, flavors, cohorts,
        priority classes, topologies, volumes and nodes; return once the next test may reuse any of
        those names."""
        keep = {"default", "kube-system", "kube-public", "kube-node-lease", "kueue-system", PORTAL_NAMESPACE}
        keep |= {"kserve", "karpenter"}
        namespaces = [ns for ns in self.raw("/api/v1/namespaces")["items"] if ns["metadata"]["name"] not in keep]
        doomed = [ns["metadata"]["name"] for ns in namespaces]  # with any the test deleted itself
        api = cleanup.Api(self.plane)
        try:
            for ns in namespaces:  # terminating first: the API server admits nothing new into them
                if not ns["metadata"].get("deletionTimestamp"):
                    api("DELETE", f"/api/v1/namespaces/{ns['metadata']['name']}")
            try:
                cleanup.empty_namespaces(api, doomed)
            except (OSError, http.client.HTTPException, AssertionError) as error:
                # Something unusual (Kueue stopped, say): the namespace controller finishes it.
                warnings.warn(f"namespaces {doomed} left to the namespace controller: {error}", stacklevel=1)
            for plural in KUEUE_CLUSTER_KINDS:
                api("DELETE", f"/apis/kueue.x-k8s.io/v1beta2/{plural}")
            for name in self.nodes:
                api("DELETE", f"/api/v1/nodes/{name}")
            for name in self.volumes:
                api("DELETE", f"/api/v1/persistentvolumes/{name}")
        finally:
            api.close()
        volumes, self.nodes, self.volumes = self.volumes, [], []
        # Pod addresses come back for the next test's heads: the stand-in forgets what it was told.
        urllib.request.urlopen(
            urllib.request.Request(f"http://{self.plane.net.ns_addr}:8265/_standin/reset", method="POST"), timeout=5
        ).read()
        # The next test reuses these names (tenant namespaces, queues, flavors, `<namespace>-<claim>`
        # volumes): wait until each is gone, finalizers (pv-protection, Kueue's) done.
        self.wait(
            lambda: not self._remaining(doomed, volumes),
            timeout=90,
            what=f"namespaces {doomed}, volumes {volumes} and Kueue's cluster objects deleted",
        )

    def _remaining(self, namespaces: list[str], volumes: list[str]) -> list[str]:
        left = [n["metadata"]["name"] for n in self.raw("/api/v1/namespaces")["items"]]
        left += [v["metadata"]["name"] for v in self.raw("/api/v1/persistentvolumes")["items"]]
        left = [name for name in left if name in namespaces or name in volumes]
        for plural in KUEUE_CLUSTER_KINDS:
            items = self.raw(f"/apis/kueue.x-k8s.io/v1beta2/{plural}")["items"]
            left += [f"{plural}/{o['metadata']['name']}" for o in items]
        return left


@pytest.fixture
def kube(control_plane, settings) -> Iterator[Kube]:
    """The real control plane for one test, the portal pointed at it as its ServiceAccount."""
    settings.KUBERNETES_URL = None
    settings.KUBECONFIG = str(control_plane.portal_kubeconfig)
    settings.KUBERNETES_TIMEOUT_SECONDS = 10.0
    kube = Kube(control_plane)
    try:
        yield kube
    finally:
        kube.clean()
