"""Every cell of the (role, state, action) table in deployments.states, walked over HTTP.

For each action and each state, each role acts on a deployment put in that state. The expected
outcome comes from the table alone: allowed → success plus the audit entry the action must
write (with the actor's name); a role the action never admits → 403; a state the action does not
apply to → 409; another tenant → 404; no credentials → 401 (API) or the login page (UI). A
refused call changes nothing: same state, same reservation, no audit entry.
"""

from __future__ import annotations

import itertools

import pytest

from core.models import AuditEvent
from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.states import HOLDS_QUOTA, PERMISSIONS, READ_ACTIONS, Action, Actor, actions_for, allowed
from quotas.services import quota_reserve

ROLES = ("anonymous", "viewer", "member", "tenant_admin", "platform_admin", "other_member")
STATES = [s.value for s in State]
API = "/api/v1/deployments"
SUCCESS = {Action.DELETE: 202}


def put(world, state: str, name: str) -> ModelDeployment:
    """A one-GPU deployment of tenant alpha in `state`, with the reservation that state holds."""
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
    if state in HOLDS_QUOTA:
        quota_reserve(tenant=world.alpha, flavor=world.h100, gpus=1, owner_type="deployment", owner_id=dep.pk)
        ModelDeployment.objects.filter(pk=dep.pk).update(reserved_gpus=1)
        dep.reserved_gpus = 1
    return dep


def actor(role: str) -> Actor | None:
    return {
        "viewer": Actor.VIEWER,
        "member": Actor.MEMBER,
        "tenant_admin": Actor.TENANT_ADMIN,
        "platform_admin": Actor.PLATFORM_ADMIN,
    }.get(role)


def expected_status(role: str, state: str, action: Action) -> int:
    if role == "anonymous":
        return 401
    if role == "other_member" or state == State.DELETED:
        return 404  # invisible: another tenant's, or gone
    if allowed(actor(role), state, action):
        return SUCCESS.get(action, 200)
    return 403 if actor(role) not in PERMISSIONS[action].actors else 409


def api_call(client, action: Action, dep: ModelDeployment):
    url = f"{API}/{dep.pk}/"
    if action == Action.UPDATE:
        return client.patch(url, {"served_model_name": "renamed"}, format="json")
    if action == Action.DELETE:
        return client.delete(url)
    body = {
        Action.APPROVE: {"generation": dep.generation},
        Action.REJECT: {"reason": "not this quarter"},
        Action.SCALE: {"min_replicas": 0, "max_replicas": 1},
    }.get(action, {})
    return client.post(f"{url}{action.value}/", body, format="json")


def snapshot(dep: ModelDeployment) -> tuple:
    row = ModelDeployment.objects.get(pk=dep.pk)
    return row.state, row.reserved_gpus, row.generation, row.min_replicas, row.served_model_name


def audit_entries(dep: ModelDeployment, action: Action) -> list[str]:
    return list(
        AuditEvent.objects.filter(
            object_type="deployments.modeldeployment", object_id=str(dep.pk), action=f"deployment.{action.value}"
        ).values_list("actor_name", flat=True)
    )


WRITE_ACTIONS = [a for a in Action if a not in READ_ACTIONS]


@pytest.mark.parametrize("action, state", list(itertools.product(WRITE_ACTIONS, STATES)))
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


UI_ACTIONS = [a for a in WRITE_ACTIONS if a not in (Action.UPDATE,)]  # the browser has no spec editor yet
UI_BODY = {
    Action.APPROVE: lambda d: {"generation": d.generation},
    Action.REJECT: lambda d: {"reason": "no"},
    Action.SCALE: lambda d: {"min_replicas": 0, "max_replicas": 1},
}


@pytest.mark.parametrize("action, state", list(itertools.product(UI_ACTIONS, STATES)))
def test_ui_cell(world, action, state):
    for role in ROLES:
        dep = put(world, state, f"{action.value}-{role.replace('_', '-')}")
        before = snapshot(dep)
        body = UI_BODY.get(action, lambda d: {})(dep)
        response = world.browser(role).post(f"/deployments/{dep.pk}/{action.value}/", body)
        want = expected_status(role, state, action)
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
    buttons = (Action.APPROVE, Action.REJECT, Action.CANCEL, Action.STOP, Action.START, Action.DELETE)
    for role in ("viewer", "member", "tenant_admin", "platform_admin"):
        dep = put(world, state, f"page-{role.replace('_', '-')}")
        page = world.browser(role).get(f"/deployments/{dep.pk}/").content.decode()
        shown = {a for a in buttons if f'action="/deployments/{dep.pk}/{a.value}/"' in page}
        assert shown == set(actions_for(actor(role), state)) & set(buttons), role


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
        assert not allowed(role, State.PENDING_APPROVAL, Action.APPROVE)
    for who in Actor:
        for state in STATES:
            if allowed(who, state, Action.START):
                assert state == State.STOPPED
        assert not any(allowed(who, State.REJECTED, a) for a in WRITE_ACTIONS if a != Action.DELETE)
