"""Readiness: each GPU flavor has schedulable nodes (labels, allocatable GPUs, taints tolerated;
none yet is amber) and an accelerator type Ray knows, the queueing strategy, Karpenter pools and
topology labels."""

from __future__ import annotations

from typing import Any

from runtime import k8s
from runtime.accelerators import accelerator_type_problem
from runtime.manifests.common import GPU_RESOURCE
from runtime.readiness_base import AMBER, GREEN, OPTIONAL_RBAC, RED, Check, ReadinessConfig
from runtime.readiness_base import denied as _denied
from runtime.readiness_pools import pool_checks, topology_checks
from runtime.spec import Toleration


def tolerates(tolerations: tuple[Toleration, ...], taint: dict[str, Any]) -> bool:
    """Whether one of `tolerations` tolerates `taint`, by the Kubernetes rules."""
    for t in tolerations:
        if t.effect and t.effect != taint.get("effect"):
            continue
        if t.operator == "Exists" and (not t.key or t.key == taint.get("key")):
            return True
        if t.key == taint.get("key") and t.value == (taint.get("value") or ""):
            return True
    return False


def _gpus(node: dict) -> int:
    try:
        return int(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE) or 0)
    except ValueError:
        return 0


def check_flavors(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    if not config.flavors:
        return []
    try:
        nodes = cluster.list(k8s.NODE)
    except k8s.PermanentClusterError as error:
        if not _denied(error):
            raise
        return [Check("flavors", "GPU flavors' nodes", AMBER, f"Cannot list nodes: {error}", f"Apply {OPTIONAL_RBAC}.")]
    checks = []
    for flavor in config.flavors:
        key, title = f"flavor:{flavor.name}", f"Nodes for flavor {flavor.name}"
        selector = dict(flavor.node_labels)
        wanted = ", ".join(f"{k}={v}" for k, v in flavor.node_labels) or "(no labels)"
        matching = [n for n in nodes if k8s.labels_match(n, selector)] if selector else []
        with_gpus = [n for n in matching if _gpus(n) > 0]
        hard = ("NoSchedule", "NoExecute")
        usable = [
            n
            for n in with_gpus
            if all(
                tolerates(flavor.tolerations, t)
                for t in (n.get("spec") or {}).get("taints") or []
                if t.get("effect") in hard
            )
        ]
        if not selector:
            checks.append(
                Check(key, title, RED, "The flavor has no node labels.", "Give the flavor its nodes' labels.")
            )
        elif not matching:
            checks.append(
                Check(
                    key,
                    title,
                    AMBER,  # not yet: nodes (or Karpenter's) may come; deployments of it wait meanwhile
                    f"No node carries {wanted} yet: deployments on this flavor wait for one.",
                    "Add (or label) the flavor's GPU nodes, or fix the flavor's labels.",
                )
            )
        elif not with_gpus:
            checks.append(
                Check(
                    key,
                    title,
                    RED,
                    f"{len(matching)} node(s) carry {wanted} but none has allocatable {GPU_RESOURCE}.",
                    "Install or fix the NVIDIA device plugin on those nodes.",
                )
            )
        elif not usable:
            taints = sorted(
                {
                    f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}"
                    for n in with_gpus
                    for t in (n.get("spec") or {}).get("taints") or []
                    if t.get("effect") in hard and not tolerates(flavor.tolerations, t)
                }
            )
            checks.append(
                Check(
                    key,
                    title,
                    RED,
                    f"Every matching node has a taint the flavor does not tolerate: {', '.join(taints)}.",
                    "Add the toleration to the flavor (its ResourceFlavor), or remove the taint.",
                )
            )
        else:
            gpus = sum(_gpus(n) for n in usable)
            odd = sorted({_gpus(n) for n in usable} - {flavor.gpus_per_node})
            status, note = GREEN, ""
            if odd:
                status = AMBER
                note = f" Some nodes have {', '.join(map(str, odd))} GPUs; the flavor says {flavor.gpus_per_node}."
            checks.append(
                Check(
                    key,
                    title,
                    status,
                    f"{len(usable)} node(s), {gpus} GPUs allocatable.{note}",
                    "Fix the flavor's GPUs per node." if odd else "",
                )
            )
    return checks


def check_accelerator_types(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    """A red check for each flavor whose accelerator type Ray Serve LLM refuses (saved before the
    portal checked it): its Ray deployments would end DEPLOY_FAILED after their GPUs started.
    Reads nothing from the cluster; none when every name is Ray's."""
    return [
        Check(
            f"accelerator:{flavor.name}",
            f"Accelerator type of flavor {flavor.name}",
            RED,
            f"{problem} Ray Serve refuses it: deployments on this flavor fail to start.",
            "Correct the flavor's accelerator type (Platform, the flavor's page).",
        )
        for flavor in config.flavors
        if (problem := accelerator_type_problem(flavor.accelerator_type))
    ]


def check_pools(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    """The queueing strategy, each Karpenter pool's nodes and pending claims, and the topology
    labels of flavors with topology levels (runtime.readiness_pools)."""
    strategy = Check(
        "kueue:queueing",
        "Queueing strategy",
        GREEN,
        f"Tenant ClusterQueues use {config.queueing_strategy}"
        + (
            ": admission in order, a large deployment is never passed."
            if config.queueing_strategy == "StrictFIFO"
            else ": a smaller deployment that fits may pass a larger one that waits."
        ),
        "",
    )
    checks = [strategy, *pool_checks(cluster, config.pools, Check, (GREEN, AMBER, RED), OPTIONAL_RBAC)]
    if any(f.topology_levels for f in config.flavors):
        try:
            nodes = cluster.list(k8s.NODE)
        except k8s.PermanentClusterError as error:
            if not _denied(error):
                raise
            return checks  # check_flavors already says nodes cannot be listed
        checks += topology_checks(nodes, config.flavors, Check, (GREEN, AMBER, RED))
    return checks
