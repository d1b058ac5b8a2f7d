"""Resource types as the API addresses them, and label matching. Pure: no client imports."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# --- kinds -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A resource type as the API addresses it; `group` is "" for the core API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The `apiVersion` field of objects of this kind."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def is_core(self) -> bool:
        """Core kinds go through CoreV1Api, custom resources through CustomObjectsApi."""
        return self.group == ""

    @property
    def key(self) -> str:
        """`group/version/plural`, the spelling kmock and the test fixture use."""
        return f"{self.group}/{self.version}/{self.plural}" if self.group else (f"{self.version}/{self.plural}")


RAYSERVICE = Kind("ray.io", "v1", "rayservices", "RayService")
# A RayService's Ray cluster: only its worker counts are patched (runtime.backends.kuberay resize).
RAYCLUSTER = Kind("ray.io", "v1", "rayclusters", "RayCluster")
WORKLOAD = Kind("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
CLUSTERQUEUE = Kind("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False)
LOCALQUEUE = Kind("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
RESOURCEFLAVOR = Kind("kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False)
COHORT = Kind("kueue.x-k8s.io", "v1beta2", "cohorts", "Cohort", namespaced=False)
WORKLOADPRIORITYCLASS = Kind(
    "kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass", namespaced=False
)
TOPOLOGY = Kind("kueue.x-k8s.io", "v1beta2", "topologies", "Topology", namespaced=False)
# Karpenter (quotas.nodepools): a NodePool, and on AWS an EC2NodeClass, per provisioned flavor;
# NodeClaims are only listed, for the readiness page's pending nodes.
NODEPOOL = Kind("karpenter.sh", "v1", "nodepools", "NodePool", namespaced=False)
EC2NODECLASS = Kind("karpenter.k8s.aws", "v1", "ec2nodeclasses", "EC2NodeClass", namespaced=False)
NODECLAIM = Kind("karpenter.sh", "v1", "nodeclaims", "NodeClaim", namespaced=False)
INFERENCESERVICE = Kind("serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService")
NAMESPACE = Kind("", "v1", "namespaces", "Namespace", namespaced=False)
# Read only, never written: pods (listed for the metrics scrape and the log tails), Events
# (listed per tenant namespace for a deployment's timeline), and what the readiness page reads
# (nodes for each flavor, the model-cache claim, Kueue's configuration).
POD = Kind("", "v1", "pods", "Pod")
EVENT = Kind("", "v1", "events", "Event")
NODE = Kind("", "v1", "nodes", "Node", namespaced=False)
PVC = Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
CONFIGMAP = Kind("", "v1", "configmaps", "ConfigMap")
# Endpoint access (runtime.manifests.gateway): a route and Kuadrant policies per deployment in
# its tenant namespace; API-key Secrets, written (never read) in the key namespace only.
HTTPROUTE = Kind("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute")
AUTHPOLICY = Kind("kuadrant.io", "v1", "authpolicies", "AuthPolicy")
RATELIMITPOLICY = Kind("kuadrant.io", "v1", "ratelimitpolicies", "RateLimitPolicy")
TOKENRATELIMITPOLICY = Kind("kuadrant.io", "v1alpha1", "tokenratelimitpolicies", "TokenRateLimitPolicy")
SECRET = Kind("", "v1", "secrets", "Secret")
# Read only, by the readiness page: the platform's TelemetryPolicy that labels Limitador's counters
# per key (runtime.manifests.telemetry), applied with the Gateway's deny-all.
TELEMETRYPOLICY = Kind("extensions.kuadrant.io", "v1alpha1", "telemetrypolicies", "TelemetryPolicy")

# Read only, by the readiness page: Kueue's controller Deployment (its image tag is its version)
# and the CRDs of KubeRay and KServe (an `app.kubernetes.io/version` label, where installed so).
DEPLOYMENT = Kind("apps", "v1", "deployments", "Deployment")
CRD = Kind("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)

# Kueue's visibility API (an aggregated API served by the Kueue controller, not a CRD): the
# pending workloads of a ClusterQueue in admission order. Only the ClusterQueue view is read —
# it carries both positions (in the ClusterQueue and in the workload's LocalQueue), so one call
# per ClusterQueue answers every deployment queued in it. Its items (PendingWorkload) carry no
# pod sets, so the GPUs ahead of a deployment come from the Workloads the sweep lists.
# The versions the portal reads, preferred first: v1beta2 (Kueue 0.19 may register only its
# v1beta2 APIService), then v1beta1 (older Kueue); both answer the same PendingWorkloadsSummary
# (kubernetes-sigs/kueue apis/visibility/v1beta2/types.go). The readiness check and
# `Cluster.pending_workloads` both pick with `visibility_version`.
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
VISIBILITY_VERSION = VISIBILITY_VERSIONS[0]
PENDING_WORKLOADS_PATH = "/apis/" + VISIBILITY_GROUP + "/{version}/clusterqueues/{name}/pendingworkloads"


def visibility_version(served: Iterable[str] | None) -> str | None:
    """The visibility API version to read among the `served` ones (discovery), or None."""
    found = set(served or ())
    return next((v for v in VISIBILITY_VERSIONS if v in found), None)


KINDS: tuple[Kind, ...] = (
    RAYSERVICE,
    RAYCLUSTER,
    WORKLOAD,
    CLUSTERQUEUE,
    LOCALQUEUE,
    RESOURCEFLAVOR,
    COHORT,
    WORKLOADPRIORITYCLASS,
    TOPOLOGY,
    NODEPOOL,
    EC2NODECLASS,
    NODECLAIM,
    INFERENCESERVICE,
    NAMESPACE,
    POD,
    EVENT,
    NODE,
    PVC,
    CONFIGMAP,
    HTTPROUTE,
    AUTHPOLICY,
    RATELIMITPOLICY,
    TOKENRATELIMITPOLICY,
    TELEMETRYPOLICY,
    SECRET,
    DEPLOYMENT,
    CRD,
)
_KINDS_BY_TYPE = {(k.api_version, k.kind): k for k in KINDS}


def kind_of(obj: Mapping[str, Any]) -> Kind:
    """The `Kind` of a manifest, from its `apiVersion` and `kind`."""
    try:
        return _KINDS_BY_TYPE[obj["apiVersion"], obj["kind"]]
    except KeyError:
        raise ValueError(
            f"unknown kind {obj.get('apiVersion')}/{obj.get('kind')}: add it to runtime.k8s.KINDS"
        ) from None


def labels_match(obj: Mapping[str, Any], selector: Mapping[str, str] | None) -> bool:
    """Whether `obj` carries every label in `selector` with the same value."""
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _selector_string(selector: Mapping[str, str] | None) -> str | None:
    if not selector:
        return None
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items()))
