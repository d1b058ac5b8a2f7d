"""What a real API server does that kmock 0.8 does not, as pure functions the emulator calls.

- Label selectors on LIST (`?labelSelector=`): equality (`k=v`, `k==v`, `k!=v`), existence
  (`k`, `!k`) and sets (`k in (a,b)`, `k notin (a,b)`), as kubernetes/apimachinery
  pkg/labels/selector.go (`Parse`) reads them. A selector it cannot parse is a 400, as there.
- Server-side apply's field ownership, for one field manager: the fields a manager applied and
  no longer applies are removed (kubernetes/kubernetes staging/src/k8s.io/apimachinery/pkg/util/
  managedfields, `applyPatcher` / structured-merge-diff `Updater.Apply` "removes fields that the
  applier no longer owns"), fields another writer set are kept. Maps are granular; every list is
  treated as atomic (replaced whole). A real CRD schema may mark lists `x-kubernetes-list-type:
  map` (pod containers, env, ports), which merges them by key: not modelled — the portal always
  applies whole lists, so the outcome is the same for its manifests.
- The error `Status` the API server answers for a missing or existing object
  (k8s.io/apimachinery/pkg/api/errors `NewNotFound`, `NewAlreadyExists`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Path = tuple[str, ...]

_REQUIREMENT = re.compile(
    r"^\s*(?:(?P<not>!)\s*(?P<absent>[^\s=!,()]+)"
    r"|(?P<key>[^\s=!,()]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s=!,()]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\))?)\s*$"
)


class SelectorError(ValueError):
    """A label selector the API server would refuse (400)."""


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p for p in parts if p.strip()]


def label_matcher(selector: str | None):
    """A predicate on an object's labels for `selector` (None or "" matches everything)."""
    checks = []
    for part in _split(selector or ""):
        match = _REQUIREMENT.match(part)
        if match is None:
            raise SelectorError(f"unable to parse requirement: {part!r}")
        if match["absent"]:
            checks.append(lambda labels, k=match["absent"]: k not in labels)
        elif match["op"] in ("=", "=="):
            checks.append(lambda labels, k=match["key"], v=match["value"]: labels.get(k) == v)
        elif match["op"] == "!=":
            checks.append(lambda labels, k=match["key"], v=match["value"]: labels.get(k) != v)
        elif match["setop"]:
            values = {v.strip() for v in match["values"].split(",") if v.strip()}
            if match["setop"] == "in":
                checks.append(lambda labels, k=match["key"], vs=values: labels.get(k) in vs)
            else:
                checks.append(lambda labels, k=match["key"], vs=values: labels.get(k) not in vs)
        else:
            checks.append(lambda labels, k=match["key"]: k in labels)

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = ((obj.get("metadata") or {}).get("labels")) or {}
        return all(check(labels) for check in checks)

    return matches


def applied_paths(manifest: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """Every map key path in an applied manifest (maps included); lists are leaves (atomic)."""
    paths: set[Path] = set()
    for key, value in manifest.items():
        path = (*prefix, key)
        paths.add(path)
        if isinstance(value, Mapping):
            paths |= applied_paths(value, path)
    return paths


def removal_patch(current: Mapping[str, Any], dropped: set[Path]) -> dict[str, Any]:
    """A merge patch (None deletes) removing the dropped paths from `current`: leaves always;
    a map only when nothing is left in it after its dropped children go."""
    patch: dict[str, Any] = {}
    for path in sorted(dropped, key=len, reverse=True):
        node: Any = current
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if node is None:
            continue
        if isinstance(node, Mapping):
            kept = [k for k in node if (*path, k) not in dropped]
            if kept:
                continue
        target = patch
        for key in path[:-1]:
            target = target.setdefault(key, {})
            if target is None:  # a parent is removed already
                break
        else:
            target[path[-1]] = None
    return patch


def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge `extra` into `base` (a copy); `base` wins nowhere: both touch disjoint paths."""
    result = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merge(dict(result[key]), value)
        else:
            result[key] = value
    return result


def qualified(resource: Any) -> str:
    """`rayservices.ray.io`, or `pods` for the core group: how Status messages name a resource."""
    group = getattr(resource, "group", None) or ""
    plural = getattr(resource, "plural", None) or ""
    return f"{plural}.{group}" if group else plural
