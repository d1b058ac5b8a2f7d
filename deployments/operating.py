"""Operating visibility for one deployment: one timeline of the portal's events and the
Kubernetes Events of its objects, the engine logs, and the startup phases.

Cluster reads happen only (a) when someone asks for one deployment (refresh of its timeline, its
logs) and (b) in the reconcile of an unsettled deployment (`record_startup`), which also keeps
the last Events it read in the cache — a page view never lists Events for the whole fleet.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.utils import timezone

from deployments.choices import State
from deployments.models import DeploymentEvent, DeploymentPhase, ModelDeployment
from deployments.specs import deployment_spec
from deployments.states import STARTING as STARTING  # the phases panel reads operating.STARTING
from deployments.states import Action, actor_of, authorize
from runtime import k8s
from runtime.backends import get_backend
from runtime.phases import ORDER, parse_time
from runtime.phases import timeline as phase_timeline

log = logging.getLogger(__name__)

EVENTS_CACHE_KEY = "deployment-cluster-events:{}"
EVENTS_CACHE_SECONDS = 24 * 3600
PORTAL_EVENTS_SHOWN = 200


# --- Kubernetes Events and the merged timeline ------------------------------------------------


def _store_cluster_events(dep: ModelDeployment, rows: list[dict]) -> dict:
    entry = {"rows": rows, "read_at": timezone.now(), "error": ""}
    cache.set(EVENTS_CACHE_KEY.format(dep.pk), entry, timeout=EVENTS_CACHE_SECONDS)
    return entry


def cluster_events(dep: ModelDeployment, *, refresh: bool = False) -> dict[str, Any]:
    """{"rows", "read_at", "error"}: the Events last read for this deployment, or read now.

    A failed read keeps what was read before and says why.
    """
    cached = cache.get(EVENTS_CACHE_KEY.format(dep.pk)) or {"rows": [], "read_at": None, "error": ""}
    if not refresh:
        return cached
    try:
        rows = get_backend(dep.backend).events(deployment_spec(dep))
    except (k8s.ClusterError, ValueError) as error:
        return {**cached, "error": f"Could not read the cluster's Events: {error}"}
    return _store_cluster_events(dep, rows)


def _portal_row(event: DeploymentEvent) -> dict[str, Any]:
    before = State(event.from_state).label if event.from_state else "—"
    moved = f"{before} → {State(event.to_state).label}" if event.to_state else ""
    return {
        "source": "portal",
        "type": event.type,
        "reason": event.reason,
        "message": event.message,
        "count": 1,
        "first": event.created,
        "last": event.created,
        "object": moved or "Portal",
        "actor": event.actor.username if event.actor_id and event.actor else "",
    }


def timeline(dep: ModelDeployment, *, refresh: bool = False) -> dict[str, Any]:
    """The portal's events and the Kubernetes Events in one list, newest first."""
    kube = cluster_events(dep, refresh=refresh)
    portal = [_portal_row(e) for e in dep.events.select_related("actor")[:PORTAL_EVENTS_SHOWN]]
    rows = []
    for row in portal + list(kube["rows"]):
        last = row["last"] if isinstance(row["last"], datetime) else parse_time(row["last"])
        first = row["first"] if isinstance(row["first"], datetime) else parse_time(row["first"])
        rows.append({**row, "last": last, "first": first or last})
    epoch = timezone.make_aware(datetime(1970, 1, 1))
    rows.sort(key=lambda r: r["last"] or epoch, reverse=True)
    return {"rows": rows, "read_at": kube["read_at"], "error": kube["error"]}


# --- logs -------------------------------------------------------------------------------------


def logs(dep: ModelDeployment, user, *, lines: int | None = None, max_bytes: int | None = None) -> dict[str, Any]:
    """{"tails", "error"}: the engine log tails, bounded and redacted. Tenant members only
    (Forbidden otherwise: the one permission table, Action.LOGS)."""
    authorize(actor_of(dep.tenant, user), dep.state, Action.LOGS)
    try:
        tails = get_backend(dep.backend).logs(deployment_spec(dep), lines=lines, max_bytes=max_bytes)
    except (k8s.ClusterError, ValueError) as error:
        return {"tails": [], "error": f"Could not read the logs: {error}"}
    return {"tails": tails, "error": ""}


def logs_text(result: dict[str, Any]) -> str:
    """The tails as one plain-text download, each under a header naming its pod and container."""
    parts = []
    for tail in result["tails"]:
        parts.append(f"===== {tail['pod']} / {tail['container']}{' (truncated)' if tail['truncated'] else ''}\n")
        parts.append(tail["text"] if tail["text"].endswith("\n") or not tail["text"] else tail["text"] + "\n")
        if tail.get("error"):
            parts.append(f"[{tail['error']}]\n")
    if result["error"]:
        parts.append(f"[{result['error']}]\n")
    return "".join(parts)


# --- startup phases ---------------------------------------------------------------------------


def _latest_event(dep: ModelDeployment, to_state: str, since: datetime | None = None) -> datetime | None:
    events = DeploymentEvent.objects.filter(deployment=dep, to_state=to_state)
    if since is not None:
        events = events.filter(created__gte=since)
    return events.order_by("-created", "-id").values_list("created", flat=True).first()


def save_markers(dep: ModelDeployment, markers: dict[str, datetime]) -> None:
    """Store this start's phase markers (first seen wins); a newer approval starts a new set."""
    approved = _latest_event(dep, State.APPROVED)
    if approved is not None:
        markers = {**markers, "approved": approved}
        ready = _latest_event(dep, State.READY, since=approved)
        if ready is not None:
            markers["ready"] = ready
    stored = dict(DeploymentPhase.objects.filter(deployment=dep).values_list("name", "at"))
    if approved is not None and stored.get("approved") not in (None, approved):
        DeploymentPhase.objects.filter(deployment=dep).delete()
        stored = {}
    new = [
        DeploymentPhase(deployment=dep, name=name, at=at)
        for name, at in markers.items()
        if name in ORDER and name not in stored
    ]
    if new:
        DeploymentPhase.objects.bulk_create(new, ignore_conflicts=True)


def record_startup(dep: ModelDeployment, backend, spec) -> None:
    """Called by the reconciler for an unsettled deployment: read its startup markers and Events
    once, keep the Events for the page, store the phases. Best effort: a failed read is logged
    and the next reconcile reads again (the deployment's state is already recorded)."""
    try:
        info = backend.startup(spec)
    except k8s.ClusterError as error:
        log.info("startup markers of %s: %s", dep.pk, error)
        return
    if info["events"]:
        _store_cluster_events(dep, info["events"])
    save_markers(dep, info["markers"])


def phases(dep: ModelDeployment) -> list[dict[str, Any]]:
    """The latest start's phases in order, with start time and duration (runtime.phases)."""
    markers = dict(DeploymentPhase.objects.filter(deployment=dep).values_list("name", "at"))
    return phase_timeline(markers, now=timezone.now())
