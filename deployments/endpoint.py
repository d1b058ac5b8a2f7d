"""What the detail page's Endpoint panel says: whether the deployment serves and, when it does
not, why and how it runs again; the client snippets (plain and streaming); where the URL leads.
Pure reads of the row and its last event (no I/O beyond the database)."""

from __future__ import annotations

import json

from deployments.choices import State
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.states import HAS_SERVING, REQUESTED, RUNNING, SERVING, STARTABLE, Action, Actor, allowed, who_may
from deployments.wake import wakes_on_request
from runtime import tasks
from runtime.backends import traits as backend_traits
from runtime.tasks import task_facts

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
# The snippets the panel shows, in order: (key in `snippets()`, heading); a task has those it has.
SNIPPETS = (
    ("curl", "curl"),
    ("curl_stream", "curl, streaming"),
    ("python", "OpenAI client (Python)"),
    ("python_stream", "OpenAI client, streaming (Python)"),
    ("python_http", "Python, plain HTTP"),
)
# What the score examples compare.
SCORE_QUERY = "What runs models?"
SCORE_DOCUMENTS = ("GPUs run models.", "Bread is baked in ovens.")


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
        if wakes_on_request(dep):
            again = (
                "A request to its endpoint wakes it: the first one waits while it starts (up to "
                f"{dep.tenant.wake_timeout_seconds} s, or the client's X-Wake-Timeout header), if the quota has room. "
            ) + again
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
            {"id": "snippet-" + key.replace("_", "-"), "title": title, "text": texts[key]}
            for key, title in SNIPPETS
            if key in texts
        ],
        "task": dep.task,
    }


def snippets(dep: ModelDeployment) -> dict[str, str]:
    """Client examples for the deployment's task (runtime.tasks: its path), and the note on where
    the URL leads. Chat and completion get curl and OpenAI-client examples, each plain and streaming
    ("stream": true; curl -N so the server-sent events print as they come); the streaming ones ask
    for usage (`stream_options`): a token limit counts a stream only when it ends with its usage
    (runtime.manifests.gateway), and every engine here serves vLLM's OpenAI API, which takes it
    (`StreamOptions.include_usage`). Embedding and score answer in one piece: curl and Python."""
    base = dep.endpoint_url or "http://<endpoint>/v1"
    model = dep.served_model_name or dep.name
    path = task_facts(dep.task).path
    # The key comes from the environment ($API_KEY: minted on the API keys page), never the page.
    headers = "  -H 'Content-Type: application/json' \\\n  -H \"Authorization: Bearer $API_KEY\" \\\n"
    client = (
        f'import os\n\nfrom openai import OpenAI\n\nclient = OpenAI(base_url="{base}", api_key=os.environ["API_KEY"])\n'
    )
    if dep.task == tasks.EMBEDDING:
        texts = {
            "curl": f"curl {base}{path} \\\n{headers}  -d '{json.dumps({'model': model, 'input': 'Hello!'})}'",
            "python": client + f'reply = client.embeddings.create(model="{model}", input=["Hello!"])\n'
            "print(len(reply.data[0].embedding))",
        }
    elif dep.task == tasks.SCORE:
        body = {"model": model, "text_1": SCORE_QUERY, "text_2": list(SCORE_DOCUMENTS)}
        texts = {
            "curl": f"curl {base}{path} \\\n{headers}  -d '{json.dumps(body)}'",
            # The OpenAI client has no scores call: plain HTTP.
            "python_http": "import os\n\nimport requests\n\n"
            f'reply = requests.post("{base}{path}", timeout=60,\n'
            '    headers={"Authorization": f"Bearer {os.environ[\'API_KEY\']}"},\n'
            f"    json={json.dumps(body)})\n"
            'for item in reply.json()["data"]:\n    print(item["index"], item["score"])',
        }
    else:
        texts = _generation_snippets(dep.task, base, model, path, headers, client)
    return {**texts, "note": endpoint_note(dep)}


def _generation_snippets(task: str, base: str, model: str, path: str, headers: str, client: str) -> dict[str, str]:
    if task == tasks.COMPLETION:
        request, call = {"prompt": "Hello!"}, "completions"
        args, printed, delta = 'prompt="Hello!"', "reply.choices[0].text", "chunk.choices[0].text"
    else:
        request, call = {"messages": [{"role": "user", "content": "Hello!"}]}, "chat.completions"
        args = 'messages=[{"role": "user", "content": "Hello!"}]'
        printed, delta = "reply.choices[0].message.content", "chunk.choices[0].delta.content"
    body = json.dumps({"model": model, **request})
    stream_body = json.dumps({"model": model, **request, "stream": True, "stream_options": STREAM_OPTIONS})
    return {
        "curl": f"curl {base}{path} \\\n{headers}  -d '{body}'",
        "curl_stream": f"curl -N {base}{path} \\\n{headers}  -d '{stream_body}'",
        "python": client + f'reply = client.{call}.create(model="{model}",\n    {args})\nprint({printed})',
        "python_stream": (
            client + f'stream = client.{call}.create(model="{model}",\n    {args}, stream=True,\n'
            '    stream_options={"include_usage": True})\n'
            "for chunk in stream:\n"
            f"    if chunk.choices and {delta}:\n"
            f'        print({delta}, end="", flush=True)\n'
            "print()"
        ),
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
