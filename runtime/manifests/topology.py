"""Topology-aware placement: a flavor's Kueue Topology and the pod-set annotations that use it.

Pure: functions of frozen specs. A flavor with `topology_levels` (node-label keys, widest first,
`kubernetes.io/hostname` last) gets a Topology of the same name, and its ResourceFlavor names it
(`spec.topologyName`, runtime.manifests.kueue), so Kueue admits a pod set only where the node
domains it asks for have room.

What the portal asks for (Kueue's TAS annotations on the pod template):
- a replica spread over several nodes (pipeline stages across nodes: KubeRay worker pods) must
  sit inside one domain of the widest level, e.g. one block, where the nodes share a fast
  fabric. A worker group holds several replicas, so the constraint is per replica: a *slice*
  of `pods_per_replica` pods (`podset-slice-required-topology` + `podset-slice-size`), not the
  whole group, which could then never grow past one block;
- a replica on one node is required on one host (`kubernetes.io/hostname`): a slice of one pod
  for a KubeRay worker group, and the predictor pod itself for KServe (Kueue's pod integration
  admits each predictor pod as its own workload, so a plain required topology is per replica).
"""

from __future__ import annotations

from typing import Any

from runtime.manifests.common import portal_labels
from runtime.spec import FlavorSpec

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"  # every Kueue object the portal renders
HOSTNAME = "kubernetes.io/hostname"

TAS_ANNOTATION_PREFIX = "kueue.x-k8s.io/podset-"  # every Kueue pod-set topology annotation
ANNOTATION_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
ANNOTATION_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
ANNOTATION_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"


def topology_name(flavor: FlavorSpec) -> str:
    """The Topology of a flavor is named after it (ResourceFlavors and Topologies are separate
    kinds, so the names cannot clash)."""
    return flavor.name


def render_topology(flavor: FlavorSpec) -> dict[str, Any]:
    """The Kueue Topology of a flavor with topology levels."""
    if not flavor.topology_levels:
        raise ValueError(f"flavor {flavor.name!r} has no topology levels")
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Topology",
        "metadata": {"name": topology_name(flavor), "labels": portal_labels()},
        "spec": {"levels": [{"nodeLabel": level} for level in flavor.topology_levels]},
    }


def replica_level(flavor: FlavorSpec, pods_per_replica: int) -> str | None:
    """The topology level one replica must fit in: the widest level when it spans nodes, the
    host when it fits on one; None when the flavor has no topology (or, for a multi-node
    replica, only the host level, which it cannot fit in by definition)."""
    levels = flavor.topology_levels
    if not levels:
        return None
    if pods_per_replica <= 1:
        return HOSTNAME if HOSTNAME in levels else None
    widest = levels[0]
    return None if widest == HOSTNAME else widest


def slice_annotations(flavor: FlavorSpec, pods_per_replica: int) -> dict[str, str]:
    """Annotations for a pod set holding whole replicas of `pods_per_replica` pods each."""
    level = replica_level(flavor, pods_per_replica)
    if level is None:
        return {}
    return {ANNOTATION_SLICE_REQUIRED: level, ANNOTATION_SLICE_SIZE: str(max(pods_per_replica, 1))}


def single_pod_annotations(flavor: FlavorSpec) -> dict[str, str]:
    """Annotations for a pod set that is one replica in one pod (the KServe predictor)."""
    level = replica_level(flavor, 1)
    return {ANNOTATION_REQUIRED: level} if level else {}
