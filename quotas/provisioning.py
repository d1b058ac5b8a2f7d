"""A GPU flavor's provisioning (Karpenter NodePool) settings and topology levels: the one place
that says what they may hold. GpuFlavor.clean calls `provisioning_errors`, so the flavor form,
the API and the Django admin refuse the same values with the same field messages.

`GpuFlavor.provisioning` is {} (the portal provisions no nodes for the flavor) or, once cleaned,
a dict with every key below (defaults filled in, so readers such as the cost profile need not
repeat them):

- `capacity_types`: a non-empty list from ["spot", "on-demand"], in order of preference.
  ["spot", "on-demand"] means spot with on-demand fallback (Karpenter launches spot while it
  is offered); ["on-demand", "spot"] is refused: Karpenter prefers spot whenever both are
  allowed, so that order cannot be honoured by one NodePool.
- `instance_types`: instance types the pool may launch ([]: any with the flavor's GPU count).
- `consolidate_after`: how long a node stays empty before it is removed ("5m"; Karpenter's
  duration syntax, or "Never").
- `expire_after`: a node's lifetime before it is replaced ("720h", or "Never").
- `node_class`: off AWS, the node class this flavor's pool names ("": the platform's
  KARPENTER_NODE_CLASS_NAME). Unused on AWS, where the portal renders an EC2NodeClass.

What the NodePool makes of the flavor's own fields is checked here as well, because the API
server (or Karpenter) would refuse it later, after the flavor was saved: node labels must exist
(they are what Kueue pins pods by) and none may sit in a label domain Karpenter keeps for itself
unless Karpenter derives it from the instance. (Every keyed toleration becomes a taint; its key
and value are valid taint fields because validate_tolerations holds them to the same syntax.)
The Kubernetes syntax itself (label keys and values, DNS names) is runtime.manifests.syntax's.

A flavor has provisioning or topology levels, never both (`topology_pool_problem` says why).
"""

from __future__ import annotations

import re
from typing import Any

from runtime.manifests import syntax
from runtime.manifests.karpenter import (
    LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_TYPE,
    is_restricted,
    is_well_known,
)
from runtime.manifests.topology import HOSTNAME

CAPACITY_TYPES = ("spot", "on-demand")
DEFAULTS: dict[str, Any] = {
    "capacity_types": ["on-demand"],
    "instance_types": [],
    "consolidate_after": "5m",
    "expire_after": "720h",
    "node_class": "",
}
MAX_INSTANCE_TYPES = 50
MAX_TOPOLOGY_LEVELS = 16  # the Topology CRD's maxItems

# Karpenter's duration syntax (NodePool CRD patterns for consolidateAfter / expireAfter).
_DURATION = re.compile(r"^(([0-9]{1,6}(s|m|h)){1,3}|Never)$")


def _label_key_ok(key: object) -> bool:
    return syntax.label_key_problem(key) is None


def _string_list(value: object, *, field: str, limit: int) -> tuple[list[str], list[str]]:
    if not isinstance(value, list):
        return [], [f"{field} must be a list of strings."]
    if len(value) > limit:
        return [], [f"{field}: at most {limit} entries."]
    if not all(isinstance(item, str) for item in value):
        return [], [f"{field} must be a list of strings."]
    if len(set(value)) != len(value):
        return [], [f"{field}: each entry at most once."]
    return list(value), []


def _capacity_types(value: object) -> list[str]:
    items, problems = _string_list(value, field="capacity_types", limit=len(CAPACITY_TYPES))
    if problems:
        return problems
    if not items or any(item not in CAPACITY_TYPES for item in items):
        return ['capacity_types: one or both of "spot" and "on-demand".']
    if items == ["on-demand", "spot"]:
        return [
            'capacity_types: Karpenter prefers spot whenever both are allowed; write ["spot", "on-demand"] '
            "(spot with on-demand fallback) or just one of them."
        ]
    return []


def _instance_types(value: object) -> list[str]:
    items, problems = _string_list(value, field="instance_types", limit=MAX_INSTANCE_TYPES)
    if problems:
        return problems
    bad = [item for item in items if not item or syntax.label_value_problem(item)]
    return [f"instance_types: {bad[0][:70]!r} is not an instance type name."] if bad else []


def _duration(value: object, field: str) -> list[str]:
    if not isinstance(value, str) or not _DURATION.fullmatch(value):
        return [f'{field}: a duration such as "30s", "5m", "720h" or "1h30m", or "Never".']
    return []


def _node_class(value: object) -> list[str]:
    if not isinstance(value, str) or (value and syntax.dns1123_subdomain_problem(value)):
        return ["node_class: the name of a node class (lowercase DNS name), or empty for the platform's."]
    return []


def _agreement(settings: dict[str, Any], node_labels: dict) -> list[str]:
    """The pool's lists and the flavor's node labels must describe the same nodes."""
    problems = []
    for label, field in ((LABEL_INSTANCE_TYPE, "instance_types"), (LABEL_CAPACITY_TYPE, "capacity_types")):
        pinned = node_labels.get(label)
        if pinned is not None and settings[field] and settings[field] != [pinned]:
            problems.append(
                f"{field}: the flavor's node label {label}={pinned} admits only [{pinned!r}]; "
                "Kueue would never place pods on the other nodes."
            )
    return problems


def _flavor_fields(node_labels: object) -> list[str]:
    """What the NodePool would make of the flavor's labels."""
    if not isinstance(node_labels, dict) or not node_labels:
        return ["a provisioned flavor needs node labels: they are what Kueue pins its pods by."]
    problems = [
        f"node label {key[:70]!r} is not a valid label key." for key in sorted(node_labels) if not _label_key_ok(key)
    ]
    problems += [
        f"node label {key!r} lies in a domain Karpenter keeps for itself; use a label of your own."
        for key in sorted(node_labels)
        if _label_key_ok(key) and is_restricted(key) and not is_well_known(key)
    ]
    return problems


def clean_provisioning(value: object, *, node_labels: object) -> tuple[dict, list[str]]:
    """(the provisioning with defaults filled in, problems); ({}, []) for a flavor not provisioned."""
    if value in (None, {}):
        return {}, []
    if not isinstance(value, dict):
        return {}, ["Provisioning must be an object (or empty: not provisioned by the portal)."]
    unknown = sorted(str(key)[:40] for key in value if key not in DEFAULTS)
    if unknown:
        return {}, [f"Unknown provisioning key(s): {', '.join(unknown)}; use {', '.join(DEFAULTS)}."]
    settings = {**DEFAULTS, **value}
    problems = [
        *_capacity_types(settings["capacity_types"]),
        *_instance_types(settings["instance_types"]),
        *_duration(settings["consolidate_after"], "consolidate_after"),
        *_duration(settings["expire_after"], "expire_after"),
        *_node_class(settings["node_class"]),
    ]
    if not problems:
        problems = _flavor_fields(node_labels)
    if not problems:
        problems = _agreement(settings, node_labels)  # type: ignore[arg-type]
    return (settings if not problems else {}), problems


def topology_problems(levels: object, *, node_labels: object) -> list[str]:
    """What the Kueue Topology CRD (schema and CEL rules) and the ResourceFlavor would refuse."""
    if levels in (None, []):
        return []
    if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
        return ["Topology levels must be a list of node label keys."]
    if len(levels) > MAX_TOPOLOGY_LEVELS:
        return [f"At most {MAX_TOPOLOGY_LEVELS} topology levels."]
    bad = [level for level in levels if not _label_key_ok(level)]
    if bad:
        return [f"{bad[0][:70]!r} is not a node label key."]
    if len(set(levels)) != len(levels):
        return ["Each topology level at most once."]
    if levels[-1] != HOSTNAME:
        return [
            f"The last (narrowest) level must be {HOSTNAME}: single-node replicas are placed on one host, "
            "and Kueue lets the levels change later only when the host is the last level."
        ]
    if not isinstance(node_labels, dict) or not node_labels:
        return ["A flavor with a topology needs node labels (Kueue reads the topology of the nodes they select)."]
    return []


def provisioning_errors(flavor) -> dict[str, list[str]]:
    """Field errors for a flavor's provisioning and topology levels; normalises `provisioning`
    (defaults filled in) when it is valid. Called by GpuFlavor.clean."""
    errors: dict[str, list[str]] = {}
    cleaned, problems = clean_provisioning(flavor.provisioning, node_labels=flavor.node_labels)
    if problems:
        errors["provisioning"] = problems
    else:
        flavor.provisioning = cleaned
    problems = topology_problems(flavor.topology_levels, node_labels=flavor.node_labels)
    if problems:
        errors["topology_levels"] = problems
    elif flavor.topology_levels is None:
        flavor.topology_levels = []
    if not errors and (problem := topology_pool_problem(flavor.provisioning, flavor.topology_levels)):
        errors["provisioning"] = [problem]
    return errors


def topology_pool_problem(provisioning: object, levels: object) -> str | None:
    """Why a flavor may not have both a Karpenter pool and topology levels (None: it may).

    Kueue's topology-aware scheduling places a pod set only on nodes that are Ready and
    schedulable (kubernetes-sigs/kueue v0.19.2, pkg/cache/scheduler/tas_nodes_cache.go `sync`),
    and holds the pods back until it has placed them (a RayCluster suspended, a predictor pod
    scheduling-gated); Karpenter adds nodes only for pods the scheduler found no room for. A
    pool at zero nodes therefore never grows: deadlock. A NodePool has no minimum size: only a
    static pool (`spec.replicas`) keeps nodes, and that is alpha behind the StaticCapacity
    feature gate, off by default (kubernetes-sigs/karpenter v1.14.1, pkg/operator/options/
    options.go), and allows no GPU limit (the CRD's CEL rule: only `limits.nodes`), so the
    portal refuses the pair instead. Also shown as a warning on flavors saved before this rule.
    """
    if provisioning and levels:
        return (
            "A flavor with topology levels cannot be provisioned by Karpenter: Kueue places topology-aware "
            "deployments only on nodes that already exist and are Ready, and Karpenter adds nodes only for pods "
            "Kueue has placed, so the pool would stay at zero nodes and its deployments would wait forever. Keep "
            "the nodes of a topology flavor yourself (e.g. a reserved block), or provision a flavor without levels."
        )
    return None
