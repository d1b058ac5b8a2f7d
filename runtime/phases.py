"""Startup phases: when each step of a deployment's start happened, read from what the cluster
and the engine already say. Pure: no I/O, no Django.

A start is a row of markers, each the moment a phase began; a phase lasts until the next marker
that was seen, so the durations of the recorded phases add up to approval → Ready exactly.

    approved → queued → admitted → scheduled → image_pulled → weights_loading → engine_ready → ready
    (cluster: Kueue Workload, pod conditions, Events, engine log markers)
    approved → process_started → weights_loading → engine_ready → ready
    (local engine: its state file and its log)

`approved` and `ready` are the portal's own moments (the approval and the Ready transition),
so `approved → process_started` and `engine_ready → ready` are the latency the portal adds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

# (name, label) in the order a start goes through them.
PHASES: tuple[tuple[str, str], ...] = (
    ("approved", "Approved, waiting for the runtime"),
    ("queued", "Queued in Kueue"),
    ("admitted", "Admitted"),
    ("scheduled", "Pods scheduled"),
    ("image_pulled", "Image pulled"),
    ("process_started", "Engine process started"),
    ("weights_loading", "Weights loading"),
    ("engine_ready", "Engine ready"),
    ("ready", "Ready in the portal"),
)
ORDER = {name: index for index, (name, _label) in enumerate(PHASES)}
LABELS = dict(PHASES)

# vLLM's log lines: "(APIServer pid=12) INFO 12-01 04:30:12 [file.py:68] message" (the prefix is
# vLLM 0.1x+; older lines start at the level). Month-day and time only, in the process's local time.
_VLLM_LINE = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR)\s+(\d\d-\d\d \d\d:\d\d:\d\d)\s+\[[^\]]*\]\s+(.*)")
LOG_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("weights_loading", re.compile(r"^Starting to load model")),
    ("engine_ready", re.compile(r"^Starting vLLM (?:API )?server")),
)


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it (`...Z`, maybe with fractions)."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def log_markers(text: str, *, now: datetime, tz: tzinfo | None = UTC) -> dict[str, datetime]:
    """The first moment each engine log marker appears (to the second: vLLM's own format).

    The year is not in the line: it is `now`'s, or the one before when that would put the line
    in the future (a log from the last days of December read in January).
    """
    found: dict[str, datetime] = {}
    for line in text.splitlines():
        match = _VLLM_LINE.search(line)
        if match is None:
            continue
        stamp, message = match.groups()
        for name, pattern in LOG_MARKERS:
            if name in found or not pattern.search(message):
                continue
            try:
                naive = datetime.strptime(f"{now.year}-{stamp}", "%Y-%m-%d %H:%M:%S")
            except ValueError:
                continue
            at = naive.replace(tzinfo=tz) if tz is not None else naive.astimezone()
            if at > now + timedelta(days=1):
                at = at.replace(year=at.year - 1)
            found[name] = at
    return found


def _condition_time(obj: Mapping[str, Any] | None, type_: str) -> datetime | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_ and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def _latest(values: Iterable[datetime | None]) -> datetime | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def cluster_markers(
    *,
    workload: Mapping[str, Any] | None,
    pods: list[Mapping[str, Any]],
    events: list[Mapping[str, Any]],
    ready_object: Mapping[str, Any] | None = None,
) -> dict[str, datetime]:
    """Markers from a Kueue Workload, the deployment's pods and their Events.

    A step counts once every pod has taken it (the latest pod's time): a replica set is scheduled
    when its last pod is. Image pulled is the last `Pulled` event of a pod, else its containers'
    start time; engine ready is the job's Ready condition, or the pods' Ready condition when there
    is no job object (`ready_object` None).
    """
    markers: dict[str, datetime | None] = {}
    if workload is not None:
        markers["queued"] = parse_time((workload.get("metadata") or {}).get("creationTimestamp"))
        markers["admitted"] = _condition_time(workload, "Admitted") or _condition_time(workload, "QuotaReserved")
    if pods:
        scheduled = [_condition_time(p, "PodScheduled") for p in pods]
        markers["scheduled"] = _latest(scheduled) if all(scheduled) else None
        pulled_by_pod: dict[str, datetime] = {}
        for event in events:
            name = (event.get("involvedObject") or {}).get("name")
            at = parse_time(event.get("lastTimestamp") or event.get("eventTime"))
            if event.get("reason") == "Pulled" and at is not None and name:
                pulled_by_pod[name] = max(at, pulled_by_pod.get(name, at))
        pulled = []
        for pod in pods:
            name = (pod.get("metadata") or {}).get("name")
            started = [
                parse_time(((s.get("state") or {}).get("running") or {}).get("startedAt"))
                for s in (pod.get("status") or {}).get("containerStatuses") or []
            ]
            pulled.append(pulled_by_pod.get(name) or _latest(started))
        markers["image_pulled"] = _latest(pulled) if all(pulled) else None
        if ready_object is None:
            # Only without a job-level Ready: markers are kept as first seen, so a pods-Ready time
            # taken while the RayService is not Ready yet would stay, and charge KubeRay's (and Ray
            # Serve's model loading) time to the portal's `engine_ready → ready` (bench B10).
            pods_ready = [_condition_time(p, "Ready") for p in pods]
            markers["engine_ready"] = _latest(pods_ready) if all(pods_ready) else None
    if ready_object is not None and _condition_time(ready_object, "Ready"):
        markers["engine_ready"] = _condition_time(ready_object, "Ready")
    return {k: v for k, v in markers.items() if v is not None}


def timeline(markers: Mapping[str, datetime], *, now: datetime) -> list[dict[str, Any]]:
    """The recorded phases in order, each with its start and duration (seconds) until the next
    recorded one; the last one is `running` (its duration so far) unless it is `ready`.

    A marker earlier than the one before it (clocks of different machines, second-resolution
    log times) starts where that one did: phases never overlap and never go backwards.
    """
    rows: list[dict[str, Any]] = []
    previous: datetime | None = None
    for name, _label in PHASES:
        at = markers.get(name)
        if at is None:
            continue
        if previous is not None and at < previous:
            at = previous
        rows.append({"name": name, "label": LABELS[name], "start": at})
        previous = at
    for index, row in enumerate(rows):
        end = rows[index + 1]["start"] if index + 1 < len(rows) else None
        row["running"] = end is None and row["name"] != "ready"
        row["duration"] = ((end or now) - row["start"]).total_seconds() if row["name"] != "ready" else 0.0
    return rows
