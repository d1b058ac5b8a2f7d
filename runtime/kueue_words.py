"""Kueue's "why not admitted" message, in words a tenant reads.

Kueue 0.19.2 explains a pending Workload in its QuotaReserved=False condition with one string
per pod set (kubernetes-sigs/kueue, pkg/scheduler/flavorassigner/flavorassigner.go at v0.19.2,
`Assignment.Message` and `Status.appendf`):

    couldn't assign flavors to pod set <name>: <reason>, <reason>, ...[; couldn't assign ... ]

Each reason is one flavor that was tried and refused. The portal's ClusterQueues list the CPU
flavor first and pin pods by their flavor's own label (`llm-portal.io/flavor`), so a GPU worker
waiting for quota always reads "flavor portal-cpu doesn't match node affinity" before the reason
that matters. This module keeps the reasons that say something about the flavor the pods can use,
says them in words, and falls back to Kueue's own text for anything it does not recognise.
"""

from __future__ import annotations

import re

_PODSETS = re.compile(r"; (?=couldn't assign flavors to pod set )")  # Assignment.Message joins pod sets
_HEAD = re.compile(r"^couldn't assign flavors to pod set (?P<podset>[^:]+): (?P<rest>.*)$", re.S)
# One pattern per reason Kueue 0.19.2 appends, in the order tried against the remaining text.
_REASONS = (
    ("affinity", re.compile(r"flavor (?P<flavor>\S+) doesn't match node affinity")),
    ("taint", re.compile(r"untolerated taint (?P<taint>.+?) in flavor (?P<flavor>[^\s,]+)")),
    (
        "more",
        re.compile(
            r"insufficient unused quota (?:in cohort )?for (?P<resource>\S+) in flavor (?P<flavor>\S+), "
            r"(?P<lack>\S+) more needed"
        ),
    ),
    (
        "max",
        re.compile(
            r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), "
            r"(?:request > maximum capacity \((?P<want>\S+) > (?P<cap>\S+)\)"
            r"|previously considered podsets requests \((?P<before>\S+)\) \+ current podset request "
            r"\((?P<now>\S+)\) > maximum capacity \((?P<cap2>\S+)\))"
        ),
    ),
    ("nomax", re.compile(r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>\S+) in ClusterQueue")),
)
_RESOURCES = {"nvidia.com/gpu": ("GPU", "GPUs"), "cpu": ("CPU", "CPU"), "memory": ("memory", "memory")}


def _amount(resource: str, amount: str) -> str:
    one, many = _RESOURCES.get(resource, (resource, resource))
    if resource == "nvidia.com/gpu" and amount.isdigit():
        return f"{amount} {one if amount == '1' else many}"
    return f"{amount} {many}"


def _parse(rest: str) -> list[tuple[str, dict]] | None:
    """The reasons in `rest`, or None when some text matches none of them."""
    found: list[tuple[str, dict]] = []
    text = rest.strip()
    while text:
        for kind, pattern in _REASONS:
            match = pattern.match(text)
            if match:
                found.append((kind, {k: v for k, v in match.groupdict().items() if v is not None}))
                text = text[match.end() :].lstrip(", ").strip()
                break
        else:
            return None
    return found


def _sentence(kind: str, f: dict) -> str:
    flavor = f.get("flavor", "")
    if kind == "more":
        lack = _amount(f["resource"], f["lack"]).replace(" ", " more ", 1)
        return f"waiting for quota: {lack} of {flavor} must be free first"
    if kind == "max":
        cap = f.get("cap") or f.get("cap2", "")
        return (
            f"asks for more {_RESOURCES.get(f['resource'], (f['resource'],) * 2)[1]} of {flavor} than the queue can "
            f"ever give ({_amount(f['resource'], cap)}, borrowing included): it waits until the quota is raised"
        )
    if kind == "nomax":
        return f"the queue has no quota for {_RESOURCES.get(f['resource'], (f['resource'],) * 2)[1]} of {flavor}"
    return f"its pods do not tolerate the taint {f['taint']} of {flavor}'s nodes"


def kueue_words(message: str) -> str:
    """Kueue's pending message in words, or the message unchanged when it is not the
    flavor-assignment kind or holds a reason this module does not know."""
    lines = [part for part in _PODSETS.split((message or "").strip()) if part.strip()]
    if not lines:
        return message
    said: list[str] = []
    for line in lines:
        head = _HEAD.match(line.strip())
        reasons = _parse(head.group("rest")) if head else None
        if not reasons:
            return message
        # Kueue 0.19.2 lists a pod set whose status holds any reason, also when a later flavor
        # fitted (Assignment.Message skips only a nil status): "flavor X doesn't match node
        # affinity" names a flavor the pods never run on, not why the Workload waits. Seen on
        # the real Kueue for a full queue: only the head's skipped GPU flavors, nothing else.
        said.extend(_sentence(k, f) for k, f in reasons if k != "affinity")
    if not said:
        return "Waiting for room in the queue: Kueue has not admitted it yet."
    text = "; ".join(dict.fromkeys(said))
    return text[0].upper() + text[1:] + "."
