"""What the deployment pages show, assembled from rows and pure renderers (no I/O)."""

from __future__ import annotations

import json
from datetime import UTC

from django.utils.dateparse import parse_datetime

from deployments.choices import State
from deployments.limits import LIMITS
from deployments.models import ModelDeployment
from deployments.panels import extra_detail_context
from deployments.queries import derived_badge
from deployments.specs import deployment_spec
from runtime.backends import traits as backend_traits

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
        return "Not submitted to the cluster yet." if dep.state in (State.PENDING_APPROVAL, State.APPROVED) else ""
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
        lines.append(
            f"Last eviction: {eviction.get('type')} ({eviction.get('reason')})"
            + (f": {eviction['message']}" if eviction.get("message") else "")
            + (f" at {plain_time(eviction['at'])}." if eviction.get("at") else ".")
        )
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


def snippets(dep: ModelDeployment) -> dict[str, str]:
    base = dep.endpoint_url or "http://<endpoint>/v1"
    model = dep.served_model_name or dep.name
    # The key comes from the environment ($API_KEY: minted on the API keys page), never the page.
    curl = (
        f"curl {base}/chat/completions \\\n  -H 'Content-Type: application/json' \\\n"
        '  -H "Authorization: Bearer $API_KEY" \\\n'
        f"  -d '{json.dumps({'model': model, 'messages': [{'role': 'user', 'content': 'Hello!'}]})}'"
    )
    python = (
        "import os\n\nfrom openai import OpenAI\n\n"
        f'client = OpenAI(base_url="{base}", api_key=os.environ["API_KEY"])\n'
        f'reply = client.chat.completions.create(model="{model}",\n'
        '    messages=[{"role": "user", "content": "Hello!"}])\n'
        "print(reply.choices[0].message.content)"
    )
    return {"curl": curl, "python": python, "note": endpoint_note(dep)}


def endpoint_note(dep: ModelDeployment) -> str:
    """Where the endpoint URL leads and which keys it takes (README "Endpoint access")."""
    from django.conf import settings

    if not backend_traits(dep.backend).on_cluster:
        return "The local engine accepts keys minted for this deployment or for its tenant."
    if settings.GATEWAY_PUBLIC_URL:
        return "Through the platform Gateway: send a key minted for this deployment or for its tenant."
    return (
        "Cluster-internal URL: no Gateway is configured (GATEWAY_PUBLIC_URL is unset), so the endpoint "
        "is reachable only inside the cluster and checks no key."
    )


def detail_context(request, dep: ModelDeployment) -> dict:
    """The detail page's (and its polled status partial's) context: the deployment's own parts,
    then what the apps above add through deployments.panels (metrics: advice and charts)."""
    from deployments.states import Action, actions_for, actor_of
    from deployments.views import allowed_actions

    return {
        "dep": dep,
        "can_edit": Action.UPDATE in actions_for(actor_of(dep.tenant, request.user), dep.state),
        "preview_title": PREVIEW_TITLES[backend_traits(dep.backend).on_cluster],
        "badge": derived_badge(dep),
        "conditions": plain_conditions(dep),
        "kueue": kueue_story(dep),
        "kueue_details": queue_details(dep) if backend_traits(dep.backend).on_cluster else [],
        "actions": allowed_actions(request.user, dep),
        "snippets": snippets(dep),
        "limits": LIMITS,
        **extra_detail_context(request, dep),
    }
