"""Two backends for one scenario: the emulator (with tests/support/operators.py playing the
controllers) and the real control plane (tests/support/controlplane). A contract test runs the
same scenario function on both and compares what the portal sees (issue 38)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from runtime import k8s

BACKENDS = ("emulator", "real")

# A kind no controller of the plane acts on (Kueue keeps no status and runs no reconciler for
# it), so resourceVersion and generation move only when the scenario writes. Cluster-scoped.
PRIORITY_CLASS = k8s.Kind(
    "kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass", namespaced=False
)


@dataclass
class Backend:
    name: str
    cluster: k8s.Cluster  # the writer under test: the portal's Cluster class, full rights
    other: k8s.Cluster  # another writer (a controller, a person with kubectl)
    api: Any = None  # K8sApiServer (emulator)
    kube: Any = None  # fixtures.Kube (real)

    def merge_patch(self, kind: k8s.Kind, name: str, namespace: str | None, body: dict) -> dict:
        """A JSON merge patch by the other writer (not an apply: it owns no field)."""
        custom = self.other.custom
        args = (kind.group, kind.version, namespace, kind.plural, name, body)
        if not kind.namespaced:
            return custom.patch_cluster_custom_object(
                kind.group, kind.version, kind.plural, name, body, _content_type="application/merge-patch+json"
            )
        return custom.patch_namespaced_custom_object(*args, _content_type="application/merge-patch+json")


def backend_for(request: pytest.FixtureRequest) -> Backend:
    if request.param == "emulator":
        api = request.getfixturevalue("cluster_api")
        api.declare(
            f"{PRIORITY_CLASS.group}/{PRIORITY_CLASS.version}/{PRIORITY_CLASS.plural}",
            PRIORITY_CLASS.kind,
            namespaced=False,
        )
        return Backend("emulator", api.cluster(), api.cluster(direct=True), api=api)
    kube = request.getfixturevalue("kube")
    return Backend("real", kube.admin, k8s.Cluster.for_kubeconfig(str(kube.plane.kubeconfig), timeout=30), kube=kube)


def strip_volatile(obj: Any) -> Any:
    """Drop what differs run to run (times, uids, resource versions, managedFields)."""
    volatile = {"lastTransitionTime", "lastUpdateTime", "creationTimestamp", "uid", "resourceVersion", "managedFields"}
    if isinstance(obj, dict):
        return {k: strip_volatile(v) for k, v in obj.items() if k not in volatile}
    if isinstance(obj, list):
        return [strip_volatile(v) for v in obj]
    return obj
