"""The deployment lifecycle in two tables, checked by every service and read by every caller.

`TRANSITIONS` says which state may follow which. `PERMISSIONS` says who may take which action
from which states: the one (role, state, action) table. Services enforce it; the UI derives its
buttons from it; tests walk every cell over HTTP. The reconciler drives queued / provisioning /
ready / degraded / failed from what the cluster reports; people and the tenant's auto-approve
policy drive the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core.exceptions import Forbidden, TransitionError
from deployments.choices import State

S = State

# Desired state "running": the runtime should make the workload exist and converge.
RUNNING = frozenset({S.APPROVED, S.QUEUED, S.PROVISIONING, S.READY, S.DEGRADED})
# States in which the deployment holds a quota reservation.
HOLDS_QUOTA = RUNNING | {S.DELETING}
TERMINAL = frozenset({S.DELETED})
# Cluster-observed states the reconciler may move between freely among RUNNING ones.
OBSERVED = frozenset({S.QUEUED, S.PROVISIONING, S.READY, S.DEGRADED, S.FAILED})

# Only an approval (platform admin or policy) leaves PENDING_APPROVAL for APPROVED; STOPPED goes
# back to APPROVED through `start`, which needs no approval because every change to what runs
# sends a stopped deployment to PENDING_APPROVAL first. REJECTED is final.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING_APPROVAL: frozenset({S.APPROVED, S.REJECTED, S.CANCELLED, S.DELETED, S.DELETING}),
    S.APPROVED: frozenset(
        {S.QUEUED, S.PROVISIONING, S.READY, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING, S.PENDING_APPROVAL}
    ),
    S.QUEUED: frozenset(
        {S.PROVISIONING, S.READY, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING, S.PENDING_APPROVAL, S.APPROVED}
    ),
    S.PROVISIONING: frozenset(
        {S.QUEUED, S.READY, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING, S.PENDING_APPROVAL, S.APPROVED}
    ),
    S.READY: frozenset(
        {S.QUEUED, S.PROVISIONING, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING, S.PENDING_APPROVAL, S.APPROVED}
    ),
    S.DEGRADED: frozenset(
        {S.QUEUED, S.PROVISIONING, S.READY, S.FAILED, S.STOPPED, S.DELETING, S.PENDING_APPROVAL, S.APPROVED}
    ),
    S.FAILED: frozenset({S.STOPPED, S.DELETING, S.PENDING_APPROVAL}),
    S.STOPPED: frozenset({S.APPROVED, S.DELETING, S.PENDING_APPROVAL}),
    S.DELETING: frozenset({S.DELETED}),
    S.REJECTED: frozenset({S.DELETED, S.DELETING}),
    S.CANCELLED: frozenset({S.DELETED, S.DELETING}),
    S.DELETED: frozenset(),
}


def can_transition(current: str, target: str) -> bool:
    return target in TRANSITIONS.get(current, frozenset())


def check_transition(current: str, target: str) -> None:
    """Raise TransitionError (HTTP 409) when `current` → `target` is not allowed."""
    if not can_transition(current, target):
        raise TransitionError(f"Cannot go from {State(current).label.lower()} to {State(target).label.lower()}.")


class Action(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    CANCEL = "cancel"
    STOP = "stop"
    START = "start"
    SCALE = "scale"
    UPDATE = "update"
    DELETE = "delete"
    LOGS = "logs"  # read the engine logs (they may carry prompts and paths: not for viewers)


class Actor(StrEnum):
    """Who acts on a deployment: a person's role in its tenant, a platform admin, or the policy."""

    VIEWER = "viewer"
    MEMBER = "member"
    TENANT_ADMIN = "tenant_admin"
    PLATFORM_ADMIN = "platform_admin"
    POLICY = "policy"  # the tenant's auto-approve policy; recorded as the actor "policy"


@dataclass(frozen=True)
class Rule:
    actors: frozenset[Actor]
    states: frozenset[str]


_PEOPLE = frozenset({Actor.MEMBER, Actor.TENANT_ADMIN, Actor.PLATFORM_ADMIN})
_EDITABLE = RUNNING | {S.FAILED, S.STOPPED, S.PENDING_APPROVAL}

PERMISSIONS: dict[Action, Rule] = {
    Action.APPROVE: Rule(frozenset({Actor.PLATFORM_ADMIN, Actor.POLICY}), frozenset({S.PENDING_APPROVAL})),
    Action.REJECT: Rule(frozenset({Actor.PLATFORM_ADMIN}), frozenset({S.PENDING_APPROVAL})),
    Action.CANCEL: Rule(_PEOPLE, frozenset({S.PENDING_APPROVAL})),
    # The policy stops idle, out-of-schedule and over-budget deployments and starts scheduled ones
    # (deployments.policy_actions); it never cancels, edits or deletes.
    Action.STOP: Rule(_PEOPLE | {Actor.POLICY}, RUNNING | {S.FAILED}),
    Action.START: Rule(_PEOPLE | {Actor.POLICY}, frozenset({S.STOPPED})),
    Action.SCALE: Rule(_PEOPLE, _EDITABLE),
    Action.UPDATE: Rule(_PEOPLE, _EDITABLE),
    Action.DELETE: Rule(_PEOPLE, frozenset(State.values) - {S.DELETING, S.DELETED}),
    # Tenant members only: a platform admin reads the phases and Kubernetes Events instead.
    Action.LOGS: Rule(frozenset({Actor.MEMBER, Actor.TENANT_ADMIN}), frozenset(State.values) - {S.DELETED}),
}
# Actions that read and change nothing: no button, no audit entry, no transition.
READ_ACTIONS = frozenset({Action.LOGS})
_VERB = {Action.LOGS: "read the logs of"}


def actor_of(tenant, user) -> Actor | None:
    """The user's standing for a deployment of `tenant` (None: not a member, not an admin)."""
    from quotas.models import is_platform_admin

    if is_platform_admin(user):
        return Actor.PLATFORM_ADMIN
    role = tenant.role_of(user)
    return Actor(role) if role else None


def allowed(actor: Actor | None, state: str, action: Action) -> bool:
    rule = PERMISSIONS[action]
    return actor in rule.actors and state in rule.states


def actions_for(actor: Actor | None, state: str) -> list[Action]:
    """The actions this actor may take now, in table order (the UI's buttons)."""
    return [action for action in PERMISSIONS if allowed(actor, state, action)]


def authorize(actor: Actor | None, state: str, action: Action) -> None:
    """Raise Forbidden (403) when the actor may never take `action`, TransitionError (409) when
    the action does not apply in `state`."""
    rule = PERMISSIONS[action]
    if actor not in rule.actors:
        who = (
            "platform admins or the tenant's policy"
            if Actor.POLICY in rule.actors
            else ("platform admins" if rule.actors == {Actor.PLATFORM_ADMIN} else "members of the tenant")
        )
        raise Forbidden(f"Only {who} may {_VERB.get(action, action.value)} a deployment.")
    if state not in rule.states:
        extra = " A rejected request is final: request a new deployment." if state == S.REJECTED else ""
        raise TransitionError(f"Cannot {action.value} a deployment that is {State(state).label.lower()}.{extra}")
