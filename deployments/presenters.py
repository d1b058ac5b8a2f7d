"""What the deployment pages show, assembled from rows and pure renderers (no I/O)."""

from __future__ import annotations

from datetime import UTC
from decimal import Decimal

from django.utils.dateparse import parse_datetime

from deployments import sizing
from deployments.changes import ChangeSummary, change_summary, history
from deployments.choices import RevisionStatus
from deployments.endpoint import endpoint_context
from deployments.limits import LIMITS
from deployments.models import DeploymentRevision, ModelDeployment
from deployments.panels import extra_detail_context
from deployments.queries import derived_badge
from deployments.specs import deployment_spec
from deployments.states import REQUESTED, RUNNING, STARTING, Action, actor_of, revision_actions_for
from runtime.backends import traits as backend_traits
from runtime.status import eviction_words

CONDITION_WORDS = {
    "Ready": ("Serving requests", "Not serving yet"),
    "Admitted": ("Kueue admitted the workload (GPUs assigned)", "Waiting in the Kueue queue"),
    "Progressing": ("Rolling out", "Stable"),
    "Degraded": ("Something is wrong", "Healthy"),
}


# A local engine is a process on this machine: nothing is admitted by Kueue.
LOCAL_CONDITION_WORDS = {**CONDITION_WORDS, "Admitted": ("Engine process started", "Engine process not started")}


def plain_time(raw: str | None) -> str:
    """An RFC 3339 time from the cluster or a sweep, as the page shows it: "2026-12-01 04:31:07 UTC"."""
    when = parse_datetime(raw) if isinstance(raw, str) else None
    if when is None:
        return raw or ""
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def plain_conditions(dep: ModelDeployment) -> list[dict]:
    rows = []
    words_for = CONDITION_WORDS if backend_traits(dep.backend).on_cluster else LOCAL_CONDITION_WORDS
    for c in dep.conditions or []:
        yes, no = words_for.get(c.get("type"), ("Yes", "No"))
        status = c.get("status")
        words = yes if status == "True" else no if status == "False" else "Unknown"
        # The cluster's RFC 3339 time, as a datetime the page shows as "5 minutes ago".
        raw = c.get("lastTransitionTime")
        since = parse_datetime(raw) if isinstance(raw, str) else None
        rows.append({**c, "words": words, "since": since if since and since.tzinfo else None})
    return rows


def kueue_story(dep: ModelDeployment) -> str:
    admitted = dep.condition("Admitted")
    if not backend_traits(dep.backend).on_cluster:
        return "Runs on this machine; Kueue is not involved."
    if admitted is None:
        if dep.state in REQUESTED:
            return "Not submitted to the cluster until a revision is approved."
        return "Submitted; Kueue has not reported on it yet." if dep.state in STARTING else ""
    if admitted.get("status") == "True":
        return (
            f"Admitted by Kueue through LocalQueue {dep.tenant.local_queue} → ClusterQueue "
            f"{dep.tenant.cluster_queue} (cohort {dep.tenant.effective_cohort})."
        )
    return f"Waiting in LocalQueue {dep.tenant.local_queue}: {admitted.get('message') or admitted.get('reason')}"


def queue_details(dep: ModelDeployment) -> list[str]:
    """The Kueue story's details, from the Admitted condition: the position the last sweep
    read from Kueue's visibility API, how often Kueue requeued the workload and why it last
    evicted it."""
    admitted = dep.condition("Admitted") or {}
    lines = []
    queue = admitted.get("queue")
    if queue and admitted.get("status") != "True":
        ahead = f"{queue['gpusAhead']} GPU{'s' if queue['gpusAhead'] != 1 else ''} requested ahead of it"
        if queue.get("unsizedAhead"):
            ahead += f" (plus {queue['unsizedAhead']} workloads from other namespaces)"
        lines.append(
            f"Position {queue['positionInLocalQueue']} of {queue['ofInLocalQueue']} in LocalQueue "
            f"{queue['localQueue']}, {queue['position']} of {queue['of']} in ClusterQueue "
            f"{queue['clusterQueue']}; {ahead}. Read {plain_time(queue['readAt'])}."
        )
    count = admitted.get("requeueCount")
    if count:
        lines.append(f"Requeued {count} time{'s' if count != 1 else ''} by Kueue.")
    eviction = admitted.get("lastEviction")
    if eviction:
        when = f" at {plain_time(eviction['at'])}" if eviction.get("at") else ""
        lines.append(f"Last eviction{when}: {eviction_words(eviction)}.")
    requeued = admitted.get("requeued")
    if requeued and requeued.get("status") == "False" and requeued.get("reason"):
        lines.append(
            f"Not requeued yet: {requeued['reason']}" + (f": {requeued['message']}" if requeued.get("message") else "")
        )
    return lines


# What the preview of each kind of backend is, in the words the page and the API use.
PREVIEW_TITLES = {True: "Rendered manifest", False: "Engine configuration"}


def rendered_manifest(dep: ModelDeployment) -> dict:
    """What the runtime applies for this deployment, rendered from its current spec: the
    Kubernetes object for a cluster backend, the engine's command line (or Serve config) for the
    local one. `{"title", "object", "error"}`, the same for the detail page and the API."""
    title = PREVIEW_TITLES[backend_traits(dep.backend).on_cluster]
    try:
        return {"title": title, "object": backend_traits(dep.backend).preview(deployment_spec(dep)), "error": None}
    except ValueError as error:
        return {"title": title, "object": None, "error": f"It cannot be rendered: {error}"}


def detail_context(request, dep: ModelDeployment) -> dict:
    """The detail page's (and its polled status partial's) context: the deployment's own parts,
    then what the apps above add through deployments.panels (metrics: advice and charts)."""
    from deployments.states import actions_for, who_may
    from deployments.views import allowed_actions

    actor = actor_of(dep.tenant, request.user)
    allowed = actions_for(actor, dep.state)
    on_cluster = backend_traits(dep.backend).on_cluster
    return {
        "dep": dep,
        "can_edit": Action.UPDATE in allowed,
        "can_scale": Action.SCALE in allowed,
        "can_read_logs": Action.LOGS in allowed,
        "logs_readers": who_may(Action.LOGS),
        # Kubernetes-only parts (the Kueue story, cluster Events) only where the backend is one.
        "on_cluster": on_cluster,
        # Not running: the conditions and the last message are what the last run reported.
        "running": dep.state in RUNNING,
        "preview_title": PREVIEW_TITLES[on_cluster],
        "badge": derived_badge(dep),
        "conditions": plain_conditions(dep),
        "kueue": kueue_story(dep) if on_cluster else "",
        "kueue_details": queue_details(dep) if on_cluster else [],
        "actions": allowed_actions(request.user, dep),
        **endpoint_context(dep, actor),  # serving_now, not_serving, snippets_apply, snippets
        "limits": LIMITS,
        "memory": sizing.deployment_fit(dep),  # the estimate, beside what the engine reports
        **extra_detail_context(request, dep),
    }


# --- revisions: the proposed change, the history ---------------------------------------------------

HOW_LABELS = {
    "start": "Starts the deployment",
    "in_place": "In place",
    "rolling": "Rolling update",
    "recreate": "Recreates the workload",
    "next_start": "At the next start",
}


def signed(value: int) -> str:
    """A GPU delta as the pages write it: "+2", "−1", "no change"."""
    return "no change" if not value else ("+" if value > 0 else "−") + str(abs(value))


def hourly(value: Decimal | None, *, sign: bool = False) -> str:
    """A cost per hour: "$7.80/h", or with `sign` a delta: "+$3.90/h", "−$3.90/h", "no change"."""
    if value is None:
        return "—"
    text = f"${abs(value):.2f}/h"
    if not sign:
        return text
    if not value:
        return "no change"
    return ("+" if value > 0 else "−") + text


def swap_note(summary: ChangeSummary) -> str:
    """The GPUs applying the change takes, said plainly (empty when nothing is swapped)."""
    swap = f"{summary.swap_gpus} GPU{'' if summary.swap_gpus == 1 else 's'}"
    if summary.how == "recreate":
        return f"The cluster needs {swap} for the swap."
    if summary.how == "rolling":
        return f"The cluster needs up to {swap} during the swap (now {summary.gpus_before})."
    if summary.how == "start":
        return (
            f"Approving it starts the deployment on {summary.gpus_after} GPU{'' if summary.gpus_after == 1 else 's'}."
        )
    return ""


def change_view(dep: ModelDeployment, rev: DeploymentRevision) -> dict:
    """A proposed revision as the detail, approvals and confirmation pages show it: the diff
    against what serves, the GPU and hourly cost delta, and how it is applied."""
    summary = change_summary(dep, rev)
    if summary.cost_delta is None:
        cost = "No GPU-hour price is set for this hardware."
    else:
        before, after = hourly(summary.cost_before), hourly(summary.cost_after)
        cost = f"{before} → {after} ({hourly(summary.cost_delta, sign=True)})"
    return {
        "revision": rev,
        "first": dep.serving_revision_id is None,
        "summary": summary,
        "rows": summary.rows,
        "gpus": f"{summary.gpus_before} → {summary.gpus_after} ({signed(summary.gpu_delta)})",
        "cost": cost,
        "price": "no GPU-hour price set" if summary.cost_after is None else hourly(summary.cost_after),
        "how_label": HOW_LABELS[summary.how],
        "swap": swap_note(summary),
    }


def revision_context(request, dep: ModelDeployment, decision_form=None) -> dict:
    """The detail page's revision parts: the serving revision, the waiting one with its change,
    and what this user may do with it (states.revision_actions_for)."""
    actor = actor_of(dep.tenant, request.user)
    pending = dep.revisions.filter(status=RevisionStatus.PROPOSED).select_related("proposed_by").first()
    serving = None
    if dep.serving_revision_id:
        serving = DeploymentRevision.objects.select_related("decided_by").get(pk=dep.serving_revision_id)
    return {
        "serving_rev": serving,
        "running_now": dep.state in RUNNING,
        "proposal": change_view(dep, pending) if pending else None,
        "proposal_actions": [a.value for a in revision_actions_for(actor, dep.state, RevisionStatus.PROPOSED)]
        if pending
        else [],
        "decision_form": decision_form,
        "revision_count": dep.revisions.count(),
    }


def history_rows(request, dep: ModelDeployment) -> list[dict]:
    """Every revision, newest first (deployments.changes.history), with its status label and
    whether this user may roll back to it (an approved revision that is not the serving one)."""
    actor = actor_of(dep.tenant, request.user)
    rows = history(dep)
    for row in rows:
        rev = row["revision"]
        row["first"] = rev.number == 1  # its "changes" are its whole spec: the request itself
        row["can_rollback"] = not row["serving"] and Action.ROLLBACK in revision_actions_for(
            actor, dep.state, rev.status
        )
    return rows


def revision_snapshot(dep: ModelDeployment) -> dict:
    """The revision numbers before a change, so the next page can say what the change became."""
    serving = dep.serving_revision if dep.serving_revision_id else None
    return {
        "serving": dep.serving_revision_id,
        "serving_spec": serving.spec if serving else None,
        "proposed": dep.proposed_number,
        "last": dep.revisions.order_by("-number").values_list("number", flat=True).first() or 0,
    }


def _keeps(dep: ModelDeployment) -> str:
    number = dep.serving_revision.number
    return f"revision {number} keeps running" if dep.state in RUNNING else f"revision {number} stays the serving one"


def proposal_outcome(dep: ModelDeployment, before: dict) -> str:
    """What an edit, a scale or a roll back became, in words: serving at once (it needs no
    approval, or the tenant's policy approved it), or waiting for approval while the serving
    revision runs on. Never "the approved version keeps serving" for what was never approved."""
    from deployments.models import SPEC_FIELDS
    from deployments.services import needs_approval
    from deployments.services.common import spec_gpus

    dep.refresh_from_db()
    last = dep.revisions.order_by("-number").values_list("number", flat=True).first() or 0
    if last == before["last"]:
        if before["proposed"] and dep.proposed_number is None:
            return f"That is what serves already: the waiting revision {before['proposed']} was withdrawn."
        return "Nothing changed."
    if dep.serving_revision_id != before["serving"]:
        old, new = before["serving_spec"], dep.serving_revision.spec
        changed = [k for k in SPEC_FIELDS if old is None or old.get(k) != new.get(k)]
        needed = old is None or needs_approval(changed, old_gpus=spec_gpus(old), new_gpus=spec_gpus(new))
        why = "approved by your tenant's policy" if needed else "it needs no approval"
        text = f"Revision {dep.serving_revision.number} is serving now: {why}."
        if dep.proposed_number and dep.proposed_number != before["proposed"]:
            text += f" The change still waiting for approval is now revision {dep.proposed_number}."
        return text
    if dep.serving_revision_id is None:
        return (
            f"Revision {dep.proposed_number} replaces your request and waits for a platform admin's approval; "
            "nothing runs until then."
        )
    return f"Revision {dep.proposed_number} waits for a platform admin's approval; {_keeps(dep)} meanwhile."


def revision_done(dep: ModelDeployment, action: str, number: int, before: dict) -> str:
    """The message after approving, rejecting, withdrawing or rolling back to a revision."""
    if action == "rollback":
        return f"Roll back to revision {number}: " + proposal_outcome(dep, before)
    dep.refresh_from_db()
    if action == "approve":
        return f"Approved revision {number}: it is the serving revision now."
    if dep.serving_revision_id is None:
        return f"Rejected revision {number}: the request is final."
    verb = "Rejected" if action == "reject" else "Withdrew"
    return f"{verb} revision {number}; {_keeps(dep)}, untouched."


def stop_words(dep: ModelDeployment) -> dict:
    """What a stop does, said before it is done: the stop confirmation page's title, explanation
    and buttons (the API's POST …/stop/ does the same in one call)."""
    if dep.state in RUNNING:
        text = f"{dep.name} stops serving: calls to its endpoint fail until it is started again."
        if dep.reserved_gpus:
            gpus = f"{dep.reserved_gpus} reserved GPU{'' if dep.reserved_gpus == 1 else 's'}"
            text += f" Its {gpus} are released now and its workload is removed."
        keep = "Keep it running"
    else:  # failed: its GPUs went with the failure
        text = f"{dep.name} failed and serves nothing; stopping it keeps it stopped until it is started again."
        keep = "Leave it as it is"
    if dep.serving_revision_id:
        text += (
            f" Revision {dep.serving_revision.number} stays the serving revision: starting it again needs no "
            "approval, only room in the quota."
        )
    if dep.proposed_number:
        text += f" The change waiting for approval (revision {dep.proposed_number}) stays waiting."
    return {"title": f"Stop {dep.name}?", "explanation": text, "confirm_label": "Yes, stop it", "keep_label": keep}


def delete_words(dep: ModelDeployment) -> dict:
    """What a delete does, said before it is done (the API's DELETE does the same in one call)."""
    text = f"{dep.name} is deleted for good: it cannot be started again."
    if dep.state in RUNNING:
        text += " Its endpoint stops answering"
        if dep.reserved_gpus:
            text += f" and its {dep.reserved_gpus} reserved GPU{'' if dep.reserved_gpus == 1 else 's'} are released"
        text += "."
    text += (
        " Keys minted for it alone are revoked; what was done to it stays in the audit log. To serve the model "
        "again, request a new deployment."
    )
    return {
        "title": f"Delete {dep.name}?",
        "explanation": text,
        "confirm_label": "Yes, delete it",
        "keep_label": "Keep it",
    }


def confirm_context(dep: ModelDeployment, action: str, rev: DeploymentRevision | None) -> dict:
    """The confirmation page of a cancel, a stop, a withdrawal or a delete: what happens, and the two buttons."""
    if action == "stop":
        return {"dep": dep, "action": action, **stop_words(dep)}
    if action == "delete":
        return {"dep": dep, "action": action, **delete_words(dep)}
    if action == "cancel":
        return {
            "dep": dep,
            "action": action,
            "title": f"Cancel the request for {dep.name}?",
            "explanation": "Nothing of this deployment was ever approved and nothing of it runs. Cancelling "
            "ends the request for good: to try again, request a new deployment.",
            "confirm_label": "Yes, cancel the request",
            "keep_label": "Keep the request",
        }
    return {
        "dep": dep,
        "action": action,
        "revision": rev.number,
        "change": change_view(dep, rev),
        "title": f"Withdraw revision {rev.number} of {dep.name}?",
        "explanation": f"The proposed change below is dropped and never applied; {_keeps(dep)} as it is: "
        "nothing restarts and its GPUs stay reserved.",
        "confirm_label": f"Yes, withdraw revision {rev.number}",
        "keep_label": "Keep the change",
    }


def default_pair(dep: ModelDeployment, numbers: list[int]) -> dict:
    """The diff page's first comparison: the newest revision against the serving one (or the one
    before it when the newest is the serving one)."""
    if not numbers:
        return {}
    newest = numbers[0]
    serving = dep.serving_revision.number if dep.serving_revision_id else None
    older = serving if serving and serving != newest else (numbers[1] if len(numbers) > 1 else newest)
    return {"from": older, "to": newest}
