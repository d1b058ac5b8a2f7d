"""What the detail page's Endpoint panel says: whether the deployment serves and, when it does
not, why and how it runs again; the client snippets (plain and streaming); where the URL leads.
Pure reads of the row and its last event (no I/O beyond the database)."""

from __future__ import annotations

import json

from deployments.choices import State
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.states import HAS_SERVING, REQUESTED, RUNNING, SERVING, STARTABLE, Action, Actor, allowed, who_may
from runtime.backends import traits as backend_traits

# Why a deployment that does not run serves nothing, by state (the event that moved it there
# adds who and when; its message, or the failure or decision reason, adds the detail).
NOT_SERVING = {
    State.PENDING_APPROVAL: "Nothing runs until a platform admin approves the request.",
    State.STOPPED: "Its GPUs are released and its workload is removed.",
    State.FAILED: "Its GPUs are released and its workload is removed.",
    State.REJECTED: "A rejected request is final: request a new deployment.",
    State.CANCELLED: "A cancelled request is final: request a new deployment.",
    State.DELETING: "Its workload is being removed.",
    State.DELETED: "Nothing of it remains.",
}
# What the streaming snippets send, so that a token limit counts their tokens (the last event
# before [DONE] carries the usage: runtime.manifests.gateway).
STREAM_OPTIONS = {"include_usage": True}
# The snippets the panel shows, in order: (key in `snippets()`, heading).
SNIPPETS = (
    ("curl", "curl"),
    ("curl_stream", "curl, streaming"),
    ("python", "OpenAI client (Python)"),
    ("python_stream", "OpenAI client, streaming (Python)"),
)


def _entered(dep: ModelDeployment) -> DeploymentEvent | None:
    """The event that moved the deployment into its current state (the newest such move)."""
    return dep.events.filter(to_state=dep.state).select_related("actor").first()


def _who(event: DeploymentEvent | None, dep: ModelDeployment) -> str:
    if event is None:
        return ""
    if event.actor_id and event.actor:
        return event.actor.username
    # No person: the tenant's policy stops and starts (deployments.policy_actions); anything
    # else without an actor (a failure) was observed by the runtime.
    return "the tenant's policy" if dep.state == State.STOPPED else ""


def serving_notice(dep: ModelDeployment, actor: Actor | None) -> dict | None:
    """None while the deployment runs (states.RUNNING); otherwise what the Endpoint panel says:
    `{"state", "why", "who", "at", "detail", "again"}` — `again` says how it serves again, and
    whether this actor may start it (the permission table), or is empty when it cannot."""
    if dep.state in RUNNING:
        return None
    event = _entered(dep)
    detail = event.message if event else ""
    if dep.state == State.FAILED:
        detail = detail or dep.status_message
    elif dep.state == State.REJECTED:
        detail = dep.decision_reason or detail
    again = ""
    if dep.state in STARTABLE:
        number = dep.serving_revision.number if dep.serving_revision_id else None
        what = f"revision {number}" if number else "its serving revision"
        if allowed(actor, dep.state, Action.START):
            again = f"Start it again with Start at the top of the page: {what} runs again without a new "
            again += "approval, if the quota has room."
        else:
            again = f"{who_may(Action.START).capitalize()} can start it again ({what}, without a new approval)."
    return {
        "state": dep.get_state_display(),
        "why": NOT_SERVING[dep.state],
        "who": _who(event, dep) if dep.state not in REQUESTED else "",
        "at": event.created if event and dep.state not in REQUESTED else None,
        "detail": detail if dep.state not in REQUESTED else "",
        "again": again,
    }


def endpoint_context(dep: ModelDeployment, actor: Actor | None) -> dict:
    """The Endpoint panel's context: serving now, the notice when it does not run, whether the
    snippets apply (the deployment serves, or may serve once approved or started), the snippets."""
    texts = snippets(dep)
    return {
        "serving_now": dep.state in SERVING,
        "not_serving": serving_notice(dep, actor),
        # Requested or with a serving revision: the snippets are how it is called (again); a
        # final or deleted one will never serve at this URL.
        "snippets_apply": dep.state in REQUESTED | HAS_SERVING,
        "snippets": texts,
        "snippet_blocks": [
            {"id": "snippet-" + key.replace("_", "-"), "title": title, "text": texts[key]} for key, title in SNIPPETS
        ],
    }


def snippets(dep: ModelDeployment) -> dict[str, str]:
    """curl and OpenAI-client examples, each plain and streaming ("stream": true; curl -N so the
    server-sent events print as they come), and the note on where the URL leads. The streaming
    ones ask for usage (`stream_options`): a token limit counts a stream only when it ends with
    its usage (runtime.manifests.gateway), and every engine here serves vLLM's OpenAI API, which
    takes it (`StreamOptions.include_usage`)."""
    base = dep.endpoint_url or "http://<endpoint>/v1"
    model = dep.served_model_name or dep.name
    messages = [{"role": "user", "content": "Hello!"}]
    # The key comes from the environment ($API_KEY: minted on the API keys page), never the page.
    headers = "  -H 'Content-Type: application/json' \\\n  -H \"Authorization: Bearer $API_KEY\" \\\n"
    curl = f"curl {base}/chat/completions \\\n{headers}  -d '{json.dumps({'model': model, 'messages': messages})}'"
    body = json.dumps({"model": model, "messages": messages, "stream": True, "stream_options": STREAM_OPTIONS})
    curl_stream = f"curl -N {base}/chat/completions \\\n{headers}  -d '{body}'"
    client = (
        f'import os\n\nfrom openai import OpenAI\n\nclient = OpenAI(base_url="{base}", api_key=os.environ["API_KEY"])\n'
    )
    python = (
        client + f'reply = client.chat.completions.create(model="{model}",\n'
        '    messages=[{"role": "user", "content": "Hello!"}])\n'
        "print(reply.choices[0].message.content)"
    )
    python_stream = (
        client + f'stream = client.chat.completions.create(model="{model}",\n'
        '    messages=[{"role": "user", "content": "Hello!"}], stream=True,\n'
        '    stream_options={"include_usage": True})\n'
        "for chunk in stream:\n"
        "    if chunk.choices and chunk.choices[0].delta.content:\n"
        '        print(chunk.choices[0].delta.content, end="", flush=True)\n'
        "print()"
    )
    return {
        "curl": curl,
        "curl_stream": curl_stream,
        "python": python,
        "python_stream": python_stream,
        "note": endpoint_note(dep),
    }


def endpoint_note(dep: ModelDeployment) -> str:
    """Where the endpoint URL leads and which keys it takes (docs/install.md, step 8 "Endpoint access")."""
    from django.conf import settings

    if not backend_traits(dep.backend).on_cluster:
        return "The local engine accepts keys minted for this deployment or for its tenant."
    if settings.GATEWAY_PUBLIC_URL:
        exposed = dep.condition("Exposed")
        if exposed is not None and exposed.get("status") != "True":  # runtime.backends.exposure
            return f"Not exposed yet: {exposed.get('message') or exposed.get('reason')}"
        said = "Through the platform Gateway: send a key minted for this deployment or for its tenant."
        return said + limits_note(dep.tenant)
    # Without the Gateway no Kuadrant AuthPolicy stands in front of the engine, and the engine
    # itself is started without a key: the Authorization header the examples send is ignored.
    return (
        "Cluster-internal URL: no Gateway is configured (GATEWAY_PUBLIC_URL is unset), so the endpoint "
        "is reachable only inside the cluster and nothing checks a key there: the examples' "
        "Authorization header is ignored until a Gateway is configured, so anyone in the cluster can call it."
    )


def limits_note(tenant) -> str:
    """The tenant's gateway limits as a key holder meets them ("" when it sets none): per key, on
    each endpoint, tokens as the responses report them (runtime.manifests.gateway)."""
    limits = []
    if tenant.tokens_per_minute:
        limits.append(
            f"{tenant.tokens_per_minute:,} tokens a minute (as each response reports them; a streamed one counts "
            'only when it asks for usage, stream_options {"include_usage": true}, as the streaming examples do)'
        )
    if tenant.requests_per_minute:
        limits.append(f"{tenant.requests_per_minute:,} requests a minute")
    if not limits:
        return ""
    return f" Each key may use {' and '.join(limits)} on this endpoint; past that the Gateway answers 429."
