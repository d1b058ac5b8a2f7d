"""A small model of Kueue's flavor assignment, run on the objects the portal renders.

It answers "which flavor would Kueue charge this pod set to?" for a rendered ClusterQueue, the
rendered ResourceFlavors and a rendered RayService or InferenceService, so tests can show that
a deployment can only be admitted into the flavor the portal reserved for it.

The rules (Kueue's flavorassigner, as its docs and the ARCHITECTURE notes describe it):

- A workload is split into pod sets: a RayService's head (1 pod) and each worker group
  (`replicas` pods, or `maxReplicas` with `at_max=True`: what an elastic job may grow to);
  an InferenceService's predictor (Kueue's pod integration admits each pod on its own, so the
  pod set holds `maxReplicas` pods only as the most the service can ever be charged).
- A pod's requests are the sum of its containers' requests.
- For each pod set and each resource group holding a resource the pod set requests, the flavors
  are tried in list order. A flavor is skipped when its `nodeLabels`, taken as a node's labels,
  do not satisfy the pod's nodeSelector restricted to **that flavor's own label keys** (Kueue
  >= 0.18.2: kubernetes-sigs/kueue v0.19.2, pkg/scheduler/flavorassigner/flavorassigner.go,
  `FlavorAssigner.checkFlavorForPodSets` builds `flavorSelector(&podSpec, flavorLabelKeys)`
  with `flavorLabelKeys := sets.KeySet(flavor.Spec.NodeLabels)`, kueue#12449; up to 0.18.1 it
  was the union of the keys of the group's flavors). So a selector key the flavor does not
  have is ignored: a pod asking `cloud.example.com/gpu: h100` fits a flavor labelled only
  `nvidia.com/gpu.product: NVIDIA-L4`, and an unlabelled flavor fits every pod. A flavor is also
  skipped when any requested resource of the group does not fit:
  `used + per-pod × pods ≤ nominalQuota + borrowable`. Borrowable is `borrowingLimit` capped by
  what the cohort has spare (`cohort_spare`), 0 outside a cohort or with nothing spare.
- The first flavor that fits is taken for the whole group; usage then counts for the next pod
  sets of the same workload. A requested resource no group covers, or a group with no fitting
  flavor, leaves the workload pending: `admit` returns None.

After quota, `place` models Kueue's topology-aware scheduling for a flavor with a Topology (see
the section at the end): which nodes each slice of a pod set would get, or pending.

Not modelled, because the portal renders none of it: required node affinity, flavor taints
(`nodeTaints`), preemption, fair sharing, flavor fungibility policies. `admit` refuses pods that
carry node affinity rather than answer for them wrongly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

GPU = "nvidia.com/gpu"

_QUANTITY = re.compile(r"^(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<suffix>[a-zA-Z]*)$")
_SUFFIX = {
    "": 1,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def quantity(value: str | int | float) -> Fraction:
    """A Kubernetes quantity ("500m", "8Gi", 4) as an exact number (cores, bytes, GPUs)."""
    match = _QUANTITY.match(str(value))
    if match is None or match["suffix"] not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    return Fraction(match["number"]) * _SUFFIX[match["suffix"]]


class NotModelled(Exception):
    """An input outside what this model of Kueue covers (node affinity, flavor taints): the model
    refuses rather than answer wrongly. The portal renders neither today."""


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    requests: dict[str, Fraction]  # per pod
    node_selector: dict[str, str]


def _pod_set(name: str, count: int, pod_spec: dict[str, Any]) -> PodSet:
    if pod_spec.get("affinity"):
        raise NotModelled(f"pod set {name}: node affinity is not modelled")
    requests: dict[str, Fraction] = {}
    for container in pod_spec.get("containers") or []:
        for resource, value in ((container.get("resources") or {}).get("requests") or {}).items():
            requests[resource] = requests.get(resource, Fraction(0)) + quantity(value)
    return PodSet(name, count, requests, dict(pod_spec.get("nodeSelector") or {}))


def pod_sets(obj: dict[str, Any], *, at_max: bool = False) -> list[PodSet]:
    """The pod sets Kueue makes of a rendered RayService or InferenceService."""
    if obj["kind"] == "RayService":
        cluster = obj["spec"]["rayClusterConfig"]
        sets = [_pod_set("head", 1, cluster["headGroupSpec"]["template"]["spec"])]
        for group in cluster.get("workerGroupSpecs") or []:
            count = group["maxReplicas"] if at_max else group.get("replicas", group.get("minReplicas", 0))
            sets.append(_pod_set(group["groupName"], count, group["template"]["spec"]))
        return sets
    if obj["kind"] == "InferenceService":
        predictor = obj["spec"]["predictor"]
        pod_spec = {k: v for k, v in predictor.items() if k in ("containers", "nodeSelector", "affinity")}
        return [_pod_set("predictor", predictor["maxReplicas"], pod_spec)]
    raise ValueError(f"no pod sets for kind {obj['kind']}")


def _fits_labels(flavor_labels: dict[str, str], selector: dict[str, str]) -> bool:
    """Whether a pod with `selector` fits a flavor with `flavor_labels` (Kueue >= 0.18.2): the
    selector is matched on the flavor's own keys only; every other key is ignored."""
    return all(flavor_labels[key] == value for key, value in selector.items() if key in flavor_labels)


def admit(
    cluster_queue: dict[str, Any],
    resource_flavors: list[dict[str, Any]],
    workload: dict[str, Any],
    *,
    usage: dict[tuple[str, str], Fraction | int] | None = None,
    cohort_spare: dict[tuple[str, str], Fraction | int] | None = None,
    at_max: bool = False,
) -> dict[str, dict[str, str]] | None:
    """{pod set: {resource: flavor}} as Kueue would admit `workload`, or None if it stays pending.

    `usage` is what the ClusterQueue already has admitted, per (flavor, resource); `cohort_spare`
    what the rest of the cohort could lend, per (flavor, resource).
    """
    labels = {f["metadata"]["name"]: dict((f.get("spec") or {}).get("nodeLabels") or {}) for f in resource_flavors}
    for flavor in resource_flavors:
        if (flavor.get("spec") or {}).get("nodeTaints"):
            raise NotModelled("flavor taints are not modelled")
    in_cohort = bool(cluster_queue["spec"].get("cohortName"))
    used: dict[tuple[str, str], Fraction] = {k: Fraction(v) for k, v in (usage or {}).items()}
    spare = cohort_spare or {}
    groups = cluster_queue["spec"].get("resourceGroups") or []
    assignment: dict[str, dict[str, str]] = {}
    for pod_set in pod_sets(workload, at_max=at_max):
        wanted = {r for r, q in pod_set.requests.items() if q > 0}
        covered = {r for g in groups for r in g["coveredResources"]}
        if wanted - covered:
            return None
        assignment[pod_set.name] = {}
        for group in groups:
            resources = [r for r in group["coveredResources"] if r in wanted]
            if not resources:
                continue
            chosen = None
            for flavor in group["flavors"]:
                name = flavor["name"]
                if name not in labels:
                    continue  # a ClusterQueue naming a missing ResourceFlavor is inactive for it
                if not _fits_labels(labels[name], pod_set.node_selector):
                    continue
                quotas = {r["name"]: r for r in flavor["resources"]}
                if all(
                    _room(quotas[r], name, r, used, spare, in_cohort) >= pod_set.requests[r] * pod_set.count
                    for r in resources
                ):
                    chosen = name
                    break
            if chosen is None:
                return None
            for resource in resources:
                key = (chosen, resource)
                used[key] = used.get(key, Fraction(0)) + pod_set.requests[resource] * pod_set.count
                assignment[pod_set.name][resource] = chosen
    return assignment


def _room(
    quota: dict[str, Any],
    flavor: str,
    resource: str,
    used: dict[tuple[str, str], Fraction],
    spare: dict[tuple[str, str], Fraction | int],
    in_cohort: bool,
) -> Fraction:
    borrowable = Fraction(0)
    if in_cohort:
        borrowable = Fraction(spare.get((flavor, resource), 0))
        if "borrowingLimit" in quota:
            borrowable = min(borrowable, quantity(quota["borrowingLimit"]))
    return quantity(quota["nominalQuota"]) + borrowable - used.get((flavor, resource), Fraction(0))


def charged(
    workload: dict[str, Any], assignment: dict[str, dict[str, str]], *, at_max: bool = False
) -> dict[tuple[str, str], Fraction]:
    """What an admitted workload costs, per (flavor, resource)."""
    cost: dict[tuple[str, str], Fraction] = {}
    for pod_set in pod_sets(workload, at_max=at_max):
        for resource, flavor in assignment[pod_set.name].items():
            key = (flavor, resource)
            cost[key] = cost.get(key, Fraction(0)) + pod_set.requests[resource] * pod_set.count
    return cost


# ---------------------------------------------------------------------------------------------
# Topology-aware scheduling (Kueue TAS), after quota: where the admitted pods may go
# ---------------------------------------------------------------------------------------------
#
# For a flavor with a Topology, Kueue also finds nodes for every pod before it admits, and a pod
# set's TAS annotations constrain them: `podset-required-topology: L` puts the whole pod set in
# one domain of level L; `podset-slice-required-topology: L` with `podset-slice-size: S` cuts it
# into slices of S pods and puts each slice in one domain of L (slices may differ). No fitting
# domain: the workload stays pending. Modelled: GPUs per node as the capacity (the binding
# resource on GPU nodes), Kueue's BestFit choice (the fitting domain with the least spare room,
# so big domains stay free for big slices), pods inside a domain on the fullest hosts first.
# Not modelled: other resources, the unconstrained / preferred modes, multi-layer slices.

REQUIRED = "kueue.x-k8s.io/podset-required-topology"
SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"


@dataclass
class Node:
    """A node of a TAS flavor: its topology labels and the GPUs still free on it."""

    name: str
    labels: dict[str, str]
    free_gpus: int


def _pod_annotations(obj: dict[str, Any], pod_set: str) -> dict[str, str]:
    if obj["kind"] == "RayService":
        for group in obj["spec"]["rayClusterConfig"].get("workerGroupSpecs") or []:
            if group["groupName"] == pod_set:
                return dict((group["template"].get("metadata") or {}).get("annotations") or {})
        return {}
    return dict(obj["spec"]["predictor"].get("annotations") or {})


def _slices(annotations: dict[str, str], count: int) -> tuple[str, int] | None:
    """(level, pods per slice) the pod set asks for, or None when it asks for no topology."""
    if SLICE_REQUIRED in annotations:
        size = int(annotations.get(SLICE_SIZE, "1"))
        if count % size:
            raise ValueError(f"{count} pods do not cut into slices of {size}")
        return annotations[SLICE_REQUIRED], size
    if REQUIRED in annotations:
        return annotations[REQUIRED], count
    return None


def _domain(node: Node, levels: list[str], level: str) -> tuple[str, ...]:
    """The node's domain at `level`: its label values from the widest level down to `level`."""
    return tuple(node.labels.get(key, "") for key in levels[: levels.index(level) + 1])


def place(
    workload: dict[str, Any], nodes: list[Node], levels: list[str], *, at_max: bool = False
) -> dict[str, list[list[str]]] | None:
    """{GPU pod set: one list of node names per slice} as Kueue TAS would place `workload` on
    `nodes` (a flavor's, with `levels` as its Topology), or None when it stays pending.
    Pod sets without GPUs or without a topology request are left out. `nodes` is not changed."""
    free = {node.name: node.free_gpus for node in nodes}
    placement: dict[str, list[list[str]]] = {}
    for pod_set in pod_sets(workload, at_max=at_max):
        per_pod = int(pod_set.requests.get(GPU, 0))
        request = _slices(_pod_annotations(workload, pod_set.name), pod_set.count)
        if per_pod == 0 or request is None or pod_set.count == 0:
            continue
        level, size = request
        if workload["kind"] == "InferenceService":
            size = 1  # Kueue's pod integration admits each predictor pod as a workload of its own
        if level not in levels:
            return None  # Kueue refuses a level its Topology does not have
        placement[pod_set.name] = []
        for _ in range(pod_set.count // size):
            chosen = _best_fit(nodes, free, levels, level, per_pod, size)
            if chosen is None:
                return None
            for name in chosen:
                free[name] -= per_pod
            placement[pod_set.name].append(chosen)
    return placement


def _best_fit(
    nodes: list[Node], free: dict[str, int], levels: list[str], level: str, per_pod: int, size: int
) -> list[str] | None:
    """Node names for one slice of `size` pods inside one domain of `level`, or None."""
    domains: dict[tuple[str, ...], list[Node]] = {}
    for node in nodes:
        domains.setdefault(_domain(node, levels, level), []).append(node)

    def room(members: list[Node]) -> int:
        return sum(free[n.name] // per_pod for n in members)

    fitting = sorted((room(m), key) for key, m in domains.items() if room(m) >= size)
    if not fitting:
        return None
    members = sorted(domains[fitting[0][1]], key=lambda n: (free[n.name] // per_pod, n.name))
    chosen: list[str] = []
    for node in members:
        take = min(free[node.name] // per_pod, size - len(chosen))
        chosen += [node.name] * take
    return chosen
