"""Karpenter core v1.14.1 with its KWOK cloud provider (`karpenter-kwok`, ../shared/k8s/README.md,
"Karpenter") as an optional part of the control plane.

The KWOK provider launches no machines: a NodeClaim becomes a Node object with
`kwok.x-k8s.io/node: fake`, which the plane's kwok turns Ready (its pods' addresses come from
kwok's `--cidr`, inside the plane's routed pod range). The provider's instance types are read
from `INSTANCE_TYPES_FILE_PATH`; `write_instance_types` writes them from the AWS list the provider
ships (`manifests/karpenter/aws_instance_types.json`: cpu, memory, pods, offerings per type), with
`nvidia.com/gpu` added to a few GPU types, since that list carries no accelerators.

Only the KWOK provider runs here (the AWS one needs EC2): the portal's NodePools name a
`KWOKNodeClass` through its platform settings for clusters off AWS (KARPENTER_PLATFORM,
KARPENTER_NODE_CLASS_GROUP / _KIND / _NAME).
"""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.controlplane.install import CRDS, MANIFESTS, _create_crds, _established
from tests.support.controlplane.procs import wait_until

if TYPE_CHECKING:
    from tests.support.controlplane.plane import ControlPlane

NAMESPACE = "karpenter"
NODE_CLASS = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
GPU_RESOURCE = "nvidia.com/gpu"
# GPUs per instance, from AWS's instance type pages (G6: NVIDIA L4, one per xlarge to 8xlarge,
# four per 12xlarge; P5: eight H100): the shipped list has every other figure.
GPUS = {"g6.xlarge": 1, "g6.12xlarge": 4, "p5.48xlarge": 8}


def write_instance_types(path: Path, gpus: dict[str, int] = GPUS) -> list[dict]:
    """Write the KWOK provider's instance types: the Linux entries of the shipped AWS list named in
    `gpus`, each with its GPUs added to `resources`; returns what was written."""
    shipped = json.loads((MANIFESTS / "karpenter" / "aws_instance_types.json").read_text())
    types = []
    for entry in shipped:
        if entry["name"] in gpus and "linux" in entry["operatingSystems"]:
            types.append({**entry, "resources": {**entry["resources"], GPU_RESOURCE: str(gpus[entry["name"]])}})
    missing = set(gpus) - {t["name"] for t in types}
    if missing:
        raise ValueError(f"not in the shipped AWS list: {sorted(missing)}")
    path.write_text(json.dumps(types, indent=1))
    return types


def install_karpenter(plane: ControlPlane) -> None:
    """Karpenter's CRDs (NodePool, NodeClaim, KWOKNodeClass, …), its namespace and the one
    KWOKNodeClass the pools name (idempotent: a plane may start Karpenter again)."""
    try:
        plane.request("GET", f"{CRDS}/nodepools.karpenter.sh")
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise
        _established(plane, _create_crds(plane, sorted((MANIFESTS / "karpenter" / "crds").glob("*.yaml"))))
    namespaces = {n["metadata"]["name"] for n in plane.request("GET", "/api/v1/namespaces")["items"]}
    if NAMESPACE not in namespaces:
        plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    path = f"/apis/{NODE_CLASS['group']}/v1alpha1/kwoknodeclasses"
    if not plane.request("GET", path)["items"]:
        plane.request(
            "POST",
            path,
            {
                "apiVersion": f"{NODE_CLASS['group']}/v1alpha1",
                "kind": NODE_CLASS["kind"],
                "metadata": {"name": NODE_CLASS["name"]},
            },
        )


def environment(plane: ControlPlane) -> dict[str, str]:
    """Karpenter reads its settings from the environment (sigs.k8s.io/karpenter v1.14.1
    pkg/operator/options/options.go, kwok/options/options.go)."""
    return {
        "SYSTEM_NAMESPACE": NAMESPACE,
        "METRICS_PORT": str(plane.ports["karpenter_metrics"]),
        "HEALTH_PROBE_PORT": str(plane.ports["karpenter_health"]),
        "KUBERNETES_MIN_VERSION": "1.19.0-0",
        "DISABLE_LEADER_ELECTION": "true",
        "KUBECONFIG": str(plane.kubeconfig),
        "INSTANCE_TYPES_FILE_PATH": str(plane.dir / "karpenter-instance-types.json"),
        # A batch closes 1 s after the last pending pod (the default), at most 3 s after the
        # first (default 10 s): the tests' pods arrive together.
        "BATCH_MAX_DURATION": "3s",
        "LOG_LEVEL": "debug",
    }


def start_karpenter(plane: ControlPlane) -> None:
    """Install what Karpenter needs and start it; waits for its readiness probe."""
    from tests.support.controlplane.plane import _http_ok

    install_karpenter(plane)
    write_instance_types(plane.dir / "karpenter-instance-types.json")
    proc = plane._proc("karpenter", [str(plane.bin["karpenter-kwok"])], env=environment(plane))
    wait_until(
        lambda: _http_ok(f"http://127.0.0.1:{plane.ports['karpenter_health']}/readyz"),
        timeout=60,
        what="karpenter",
        procs=[proc],
    )
