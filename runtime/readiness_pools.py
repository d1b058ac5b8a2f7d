"""Readiness of the Karpenter pools the portal keeps, of the flavors' topology labels, and the
queueing strategy its ClusterQueues use (runtime.readiness runs these with its other checks).

Per flavor with topology levels: every node of the flavor must carry each level's label, or
Kueue's topology-aware scheduling cannot place pods on it (amber, with the nodes named).

Per provisioned flavor: the nodes Karpenter made for its pool (label `karpenter.sh/nodepool`)
with their GPUs, and the NodeClaims not yet initialized: nodes being launched for pods that
Kueue admitted (a queued deployment waiting for capacity shows here). A claim whose launch
failed (a condition False with a reason, e.g. no capacity for the instance types) is amber.
"""

from __future__ import annotations

from typing import Any

from runtime import k8s
from runtime.k8s.kinds import NODECLAIM
from runtime.manifests.common import GPU_RESOURCE
from runtime.manifests.karpenter import LABEL_NODEPOOL
from runtime.spec import FlavorSpec

MAX_LISTED = 10  # node and claim names shown per pool
_PROGRESS = ("Launched", "Registered", "Initialized")


def _gpus(node: dict[str, Any]) -> int:
    try:
        return int(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, 0))
    except (TypeError, ValueError):
        return 0


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or [] if isinstance(c, dict)}


def claim_state(claim: dict[str, Any]) -> tuple[str, str]:
    """("initialized" | "pending" | "failed", why) for one NodeClaim."""
    conditions = _conditions(claim)
    if (conditions.get("Initialized") or {}).get("status") == "True":
        return "initialized", ""
    for kind in _PROGRESS:
        condition = conditions.get(kind) or {}
        if condition.get("status") == "False" and condition.get("reason"):
            return "failed", f"{kind}: {condition.get('reason')} {condition.get('message', '')}".strip()
        if condition.get("status") != "True":
            return "pending", f"waiting to be {kind.lower()}"
    return "pending", "waiting to be initialized"


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def pool_checks(cluster: k8s.Cluster, pools: tuple[str, ...], make_check, statuses, optional_rbac: str) -> list:
    """One check per provisioned flavor's pool: its nodes and the claims still on their way."""
    green, amber, red = statuses
    if not pools:
        return []
    try:
        nodes = cluster.list(k8s.NODE)
        claims = cluster.list(NODECLAIM)
    except k8s.NotFound:
        return [make_check("pools", "Karpenter pools", red, "NodeClaims are not served.", "Install Karpenter (v1).")]
    except k8s.PermanentClusterError as error:
        if error.status not in (401, 403):
            raise
        return [make_check("pools", "Karpenter pools", amber, f"Cannot list: {error}", f"Apply {optional_rbac}.")]
    checks = []
    for pool in pools:
        own = [n for n in nodes if k8s.labels_match(n, {LABEL_NODEPOOL: pool})]
        states = [
            (c["metadata"]["name"], *claim_state(c)) for c in claims if k8s.labels_match(c, {LABEL_NODEPOOL: pool})
        ]
        pending = [f"{name} ({why})" for name, state, why in states if state == "pending"]
        failed = [f"{name} ({why})" for name, state, why in states if state == "failed"]
        detail = f"{len(own)} node(s), {sum(_gpus(n) for n in own)} GPUs"
        if own:
            detail += f": {_names([n['metadata']['name'] for n in own])}"
        detail += f". Pending node claims: {_names(pending) if pending else 'none'}."
        if failed:
            detail += f" Failed: {_names(failed)}."
        fix = "Check the pool's instance types and capacity types against what the region offers." if failed else ""
        checks.append(make_check(f"pool:{pool}", f"Karpenter pool {pool}", amber if failed else green, detail, fix))
    return checks


def topology_checks(nodes: list[dict[str, Any]], flavors: tuple[FlavorSpec, ...], make_check, statuses) -> list:
    """One check per flavor with topology levels: do its nodes carry every level's label?"""
    green, amber, _ = statuses
    checks = []
    for flavor in flavors:
        if not flavor.topology_levels or not flavor.node_labels:
            continue
        own = [n for n in nodes if k8s.labels_match(n, dict(flavor.node_labels))]
        if not own:
            continue  # the flavor's own check already says it has no nodes
        key, title = f"topology:{flavor.name}", f"Topology labels of flavor {flavor.name}"
        lacking = {
            n["metadata"]["name"]: [
                lvl for lvl in flavor.topology_levels if lvl not in (n["metadata"].get("labels") or {})
            ]
            for n in own
        }
        lacking = {name: missing for name, missing in lacking.items() if missing}
        widest = flavor.topology_levels[0]
        domains = {(n["metadata"].get("labels") or {}).get(widest) for n in own} - {None}
        if lacking:
            named = _names([f"{name} (no {', '.join(missing)})" for name, missing in sorted(lacking.items())])
            detail = f"{len(lacking)} of {len(own)} node(s) lack topology labels: {named}."
            fix = "Label those nodes, or Kueue cannot place the flavor's pods on them."
            checks.append(make_check(key, title, amber, detail, fix))
        else:
            checks.append(make_check(key, title, green, f"{len(own)} node(s) in {len(domains)} {widest} domain(s)."))
    return checks
