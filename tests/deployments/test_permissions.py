"""Every cell of the (role, state, action) table in deployments.states, walked over HTTP.

For each action and each state, each role acts on a deployment put in that state, with the
revisions the services leave there (a change waiting beside what serves, where something was
approved). The expected outcome comes from the table alone: allowed → success plus the audit
entry the action must write (with the actor's name); a role the action never admits → 403; a
state (or a revision status) the action does not apply to → 409; another tenant → 404; no
credentials → 401 (API) or the login page (UI). A refused call changes nothing: same state,
same reservation, same revisions, no audit entry.

The actions on one revision (approve, reject, withdraw, rollback) are walked twice in the API:
at the revision (`revisions/<number>/<action>/`) and, for approve / reject / withdraw, at the
deployment with the revision number in the body.
"""

from __future__ import annotations

import itertools

import pytest

from core.models import AuditEvent
from deployments.choices import RevisionStatus, State
from deployments.models import DeploymentRevision, ModelDeployment
from deployments.services.common import spec_of
from deployments.states import (
    HAS_SERVING,
    HOLDS_GPUS,
    PERMISSIONS,
    READ_ACTIONS,
    REQUESTED,
    REVISION_ACTIONS,
    Action,
    Actor,
    actions_for,
    allowed,
    revision_actions_for,
)
from quotas.services import quota_reserve

ROLES = ("anonymous", "viewer", "member", "tenant_admin", "platform_admin", "other_member")
STATES = [s.value for s in State]
API = "/api/v1/deployments"
SUCCESS = {Action.DELETE: 202}
R = RevisionStatus


def _revision(dep, number: int, status: str, **spec) -> DeploymentRevision:
    return DeploymentRevision.objects.create(
        deployment=dep, number=number, spec=spec_of(dep) | spec, gpus=1, status=status, message=f"r{number}"
    )


def put(world, state: str, name: str) -> ModelDeployment:
    """A one-GPU deployment of tenant alpha in `state`, with the reservation that state holds and
    the revisions the services leave in it: revision 1 alone before anything was approved
    (proposed, rejected, withdrawn); once approved, revision 1 (approved, replaced), revision 2
    (serving) and revision 3, a change waiting (withdrawn by a deletion)."""
    ran = state not in (State.PENDING_APPROVAL, State.REJECTED, State.CANCELLED)
    dep = ModelDeployment.objects.create(
        tenant=world.alpha,
        name=name,
        model_source="meta-llama/Meta-Llama-3-8B-Instruct",
        served_model_name=name,
        flavor=world.h100,
        backend="kuberay",
        max_replicas=1,
        max_model_len=4096,
        state=state,
        observed_generation=1 if ran else 0,
    )
    if not ran:
        first = {State.PENDING_APPROVAL: R.PROPOSED, State.REJECTED: R.REJECTED}.get(state, R.WITHDRAWN)
        _revision(dep, 1, first)
    else:
        _revision(dep, 1, R.APPROVED, max_model_len=2048)
        dep.serving_revision = _revision(dep, 2, R.APPROVED)
        dep.save(update_fields=["serving_revision"])
        _revision(dep, 3, R.PROPOSED if state in HAS_SERVING else R.WITHDRAWN, max_model_len=8192)
    if state in HOLDS_GPUS:
        quota_reserve(tenant=world.alpha, flavor=world.h100, gpus=1, owner_type="deployment", owner_id=dep.pk)
        ModelDeployment.objects.filter(pk=dep.pk).update(reserved_gpus=1)
        dep.reserved_gpus = 1
    return dep


def target(dep: ModelDeployment, action: Action) -> DeploymentRevision:
    """The revision an action names: the earliest for a rollback, else the latest (the waiting one)."""
    return dep.revisions.order_by("number" if action == Action.ROLLBACK else "-number").first()


def actor(role: str) -> Actor | None:
    return {
        "viewer": Actor.VIEWER,
        "member": Actor.MEMBER,
        "tenant_admin": Actor.TENANT_ADMIN,
        "platform_admin": Actor.PLATFORM_ADMIN,
    }.get(role)


def expected_status(role: str, state: str, action: Action, revision: str | None = None) -> int:
    if role == "anonymous":
        return 401
    if role == "other_member" or state == State.DELETED:
        return 404  # invisible: another tenant's, or gone
    if allowed(actor(role), state, action, revision):
        return SUCCESS.get(action, 200)
    return 403 if actor(role) not in PERMISSIONS[action].actors else 409


def api_call(client, action: Action, dep: ModelDeployment):
    url = f"{API}/{dep.pk}/"
    if action == Action.UPDATE:
        return client.patch(url, {"served_model_name": f"renamed-{dep.pk}"}, format="json")  # unique per tenant
    if action == Action.DELETE:
        return client.delete(url)
    body = {Action.SCALE: {"min_replicas": 0, "max_replicas": 1}}.get(action, {})
    return client.post(f"{url}{action.value}/", body, format="json")


def revision_call(client, action: Action, dep: ModelDeployment, number: int, where: str):
    if where == "revision":
        body = {"reason": "not this quarter"} if action == Action.REJECT else {}
        return client.post(f"{API}/{dep.pk}/revisions/{number}/{action.value}/", body, format="json")
    return client.post(
        f"{API}/{dep.pk}/{action.value}/", {"revision": number, "reason": "not this quarter"}, format="json"
    )


def snapshot(dep: ModelDeployment) -> tuple:
    row = ModelDeployment.objects.get(pk=dep.pk)
    revisions = tuple(row.revisions.order_by("number").values_list("number", "status", "rollback_of"))
    return (
        row.state,
        row.reserved_gpus,
        row.generation,
        row.min_replicas,
        row.served_model_name,
        row.serving_revision_id,
        revisions,
    )


def audit_entries(dep: ModelDeployment, action: Action) -> list[str]:
    return list(
        AuditEvent.objects.filter(
            object_type="deployments.modeldeployment", object_id=str(dep.pk), action=f"deployment.{action.value}"
        ).values_list("actor_name", flat=True)
    )


def revision_effect(dep: ModelDeployment, action: Action, number: int) -> tuple:
    """What an allowed revision action must leave: the named revision's status, the serving
    revision's number and, for a rollback, the new proposal restoring the named revision."""
    row = ModelDeployment.objects.select_related("serving_revision").get(pk=dep.pk)
    named = row.revisions.get(number=number).status
    latest = row.revisions.order_by("-number").first()
    serving = row.serving_revision.number if row.serving_revision else None
    return named, serving, (latest.status, latest.rollback_of)


# Deciding on revision 1 of a request never approved: it serves, or the request ends.
FIRST_EFFECT = {
    Action.APPROVE: (R.APPROVED, 1, (R.APPROVED, None)),
    Action.REJECT: (R.REJECTED, None, (R.REJECTED, None)),
}
EFFECT = {
    Action.APPROVE: (R.APPROVED, 3, (R.APPROVED, None)),
    Action.REJECT: (R.REJECTED, 2, (R.REJECTED, None)),
    Action.WITHDRAW: (R.WITHDRAWN, 2, (R.WITHDRAWN, None)),
    Action.ROLLBACK: (R.APPROVED, 2, (R.PROPOSED, 1)),  # revision 4 waits for approval
}

DEPLOYMENT_ACTIONS = [a for a in Action if a not in READ_ACTIONS and a not in REVISION_ACTIONS]
WRITE_ACTIONS = [a for a in Action if a not in READ_ACTIONS]


@pytest.mark.parametrize("action, state", list(itertools.product(DEPLOYMENT_ACTIONS, STATES)))
def test_api_cell(world, action, state):
    for role in ROLES:
        dep = put(world, state, f"{action.value}-{role.replace('_', '-')}")
        before = snapshot(dep)
        response = api_call(world.client(role), action, dep)
        want = expected_status(role, state, action)
        assert response.status_code == want, (role, response.content[:300])
        if want in (200, 202):
            assert audit_entries(dep, action) == [world.users[role].username], role
            assert snapshot(dep) != before, role  # the action did something
        else:
            assert audit_entries(dep, action) == [] and snapshot(dep) == before, role


REVISION_CELLS = [
    (action, state, where)
    for action, state in itertools.product(sorted(REVISION_ACTIONS), STATES)
    for where in ("revision", "deployment")
    if where == "revision" or action != Action.ROLLBACK  # rollback is only at the revision
]


@pytest.mark.parametrize("action, state, where", REVISION_CELLS)
def test_api_revision_cell(world, action, state, where):
    for role in ROLES:
        dep = put(world, state, f"{action.value}-{role.replace('_', '-')}")
        rev = target(dep, action)
        before = snapshot(dep)
        response = revision_call(world.client(role), action, dep, rev.number, where)
        want = expected_status(role, state, action, rev.status)
        assert response.status_code == want, (role, rev.status, response.content[:300])
        if want == 200:
            effect = (FIRST_EFFECT if state in REQUESTED else EFFECT)[action]
            assert audit_entries(dep, action) == [world.users[role].username], role
            assert revision_effect(dep, action, rev.number) == effect, role
            assert response.json()["serving_revision"] == effect[1], role
        else:
            assert audit_entries(dep, action) == [] and snapshot(dep) == before, role


@pytest.mark.parametrize("action", sorted(REVISION_ACTIONS))
def test_a_revision_status_the_action_does_not_apply_to_is_409_and_changes_nothing(world, action):
    """Allowed role and state, wrong revision: approving what serves, rolling back what waits."""
    role = "platform_admin"
    dep = put(world, State.READY, f"status-{action.value}")
    number = 3 if action == Action.ROLLBACK else 2  # the proposed one / the serving one
    before = snapshot(dep)
    response = revision_call(world.client(role), action, dep, number, "revision")
    assert response.status_code == 409, response.content
    assert response.json()["code"] == ("invalid_transition" if action == Action.ROLLBACK else "stale_revision")
    assert audit_entries(dep, action) == [] and snapshot(dep) == before


UI_ACTIONS = [a for a in WRITE_ACTIONS if a not in (Action.UPDATE,)]  # the edit page has its own form
UI_BODY = {
    Action.SCALE: lambda d: {"min_replicas": 0, "max_replicas": 1},
    **{a: lambda d, a=a: {"revision": target(d, a).number, "reason": "no"} for a in REVISION_ACTIONS},
}


@pytest.mark.parametrize("action, state", list(itertools.product(UI_ACTIONS, STATES)))
def test_ui_cell(world, action, state):
    for role in ROLES:
        dep = put(world, state, f"{action.value}-{role.replace('_', '-')}")
        before = snapshot(dep)
        body = UI_BODY.get(action, lambda d: {})(dep)
        revision = target(dep, action).status if action in REVISION_ACTIONS else None
        response = world.browser(role).post(f"/deployments/{dep.pk}/{action.value}/", body)
        want = expected_status(role, state, action, revision)
        if want == 401:
            assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
        elif want == 404:
            assert response.status_code == 404
        else:
            assert response.status_code == 302 and response["Location"] == f"/deployments/{dep.pk}/", role
        if want in (200, 202):
            assert audit_entries(dep, action) == [world.users[role].username], role
        else:
            assert audit_entries(dep, action) == [] and snapshot(dep) == before, role


@pytest.mark.parametrize("state", [s for s in STATES if s != State.DELETED])
def test_the_detail_page_offers_exactly_the_allowed_buttons(world, state):
    """The deployment's own buttons, and those beside the change waiting for approval."""
    buttons = (Action.APPROVE, Action.REJECT, Action.WITHDRAW, Action.CANCEL, Action.STOP, Action.START, Action.DELETE)
    for role in ("viewer", "member", "tenant_admin", "platform_admin"):
        dep = put(world, state, f"page-{role.replace('_', '-')}")
        page = world.browser(role).get(f"/deployments/{dep.pk}/").content.decode()
        shown = {a for a in buttons if f'action="/deployments/{dep.pk}/{a.value}/"' in page}
        offered = set(actions_for(actor(role), state))
        if dep.revisions.filter(status=R.PROPOSED).exists():
            offered |= set(revision_actions_for(actor(role), state, R.PROPOSED))
        assert shown == offered & set(buttons), role


@pytest.mark.parametrize("state", STATES)
def test_logs_cell(world, state):
    """The read action: allowed → 200 and nothing changes or is audited; else 403 / 404 / 401."""
    for role in ROLES:
        dep = put(world, state, f"logs-{role.replace('_', '-')}")
        before = snapshot(dep)
        response = world.client(role).get(f"{API}/{dep.pk}/logs/")
        want = expected_status(role, state, Action.LOGS)
        assert response.status_code == want, (role, response.content[:300])
        if want == 200:
            assert set(response.json()) == {"tails", "error"}, role
        assert audit_entries(dep, Action.LOGS) == [] and snapshot(dep) == before, role


def test_the_table_never_lets_a_person_approve_or_anyone_start_what_was_not_approved():
    """The integrity promise, read off the table itself."""
    for role in (Actor.VIEWER, Actor.MEMBER, Actor.TENANT_ADMIN):
        for state in STATES:
            assert not allowed(role, state, Action.APPROVE)
            assert not allowed(role, state, Action.REJECT)
    for who in Actor:
        for state in STATES:
            if allowed(who, state, Action.START):
                assert state in (State.STOPPED, State.FAILED)
            for action in (Action.WITHDRAW, Action.ROLLBACK):
                if allowed(who, state, action):
                    assert state in HAS_SERVING and state not in REQUESTED  # something was approved
        assert not any(allowed(who, State.REJECTED, a) for a in WRITE_ACTIONS if a != Action.DELETE)
