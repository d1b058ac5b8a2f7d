"""The deployment lifecycle, its named sets of states and the one permission table.

A deployment's `state` is the lifecycle of what runs, and only that. Approval belongs to a
*revision* (deployments.revisions): a change to a running deployment is a proposed revision
and never moves the deployment's state, so what serves keeps serving, keeps its GPUs and stays
under the budget, schedule and idle policies while the change waits.

`TRANSITIONS` says which state may follow which. The named sets below are the only place a
set of states is written: every sweep, ledger and page imports them (a test walks the code to
keep it so, and classifies every state in every set). `PERMISSIONS` is the (role, state,
action) table; for the actions that decide on a revision it also names the revision statuses
the action applies to. Services enforce it, the UI derives its buttons from it, tests walk
every cell over HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core.exceptions import Forbidden, TransitionError
from deployments.choices import RevisionStatus, State
from quotas.actors import Actor, actor_of  # noqa: F401 - the deployment tables' actors, read from here too

S = State

# --- named sets: the only place a set of deployment states is written ---------------------------

# Nothing was ever approved: revision 1 (or a later edit of it) waits for its first decision.
REQUESTED = frozenset({S.PENDING_APPROVAL})
# Desired state "running": the runtime should make the serving revision's workload exist.
RUNNING = frozenset({S.APPROVED, S.QUEUED, S.PROVISIONING, S.READY, S.DEGRADED})
# Running but not serving yet: the reconciler records startup phases and Kubernetes Events.
STARTING = frozenset({S.APPROVED, S.QUEUED, S.PROVISIONING})
# Answering requests: the usage ledger counts serving time from these.
SERVING = frozenset({S.READY, S.DEGRADED})
# Admitted by Kueue (its workload has its GPUs): a deployment a higher tier displaced takes a
# reservation again when it moves into these from the queue (deployments.preemption).
ADMITTED = frozenset({S.PROVISIONING, S.READY, S.DEGRADED})
# Running but not admitted: approved and on its way to the queue, or waiting (again) in it.
WAITING = frozenset({S.APPROVED, S.QUEUED})
# Settled: the reconciler stops looking again on its own (the beat sweep still notices drift);
# a degraded deployment is still watched, so its recovery shows without waiting for the sweep.
SETTLED = frozenset({S.READY})
# Worth scraping for engine metrics (an engine that is provisioning may already report).
SCRAPED = frozenset({S.PROVISIONING, S.READY, S.DEGRADED})
# The workload must go away: the reconciler removes it (the GPUs went with the state change).
TEAR_DOWN = frozenset({S.STOPPED, S.FAILED, S.REJECTED, S.CANCELLED, S.DELETING})
# Holds a GPU reservation: exactly the running states. `services.common.settle_gpus` is the one
# function that reserves and releases, and it reads this set (docs/deployments.md states the rule).
HOLDS_GPUS = RUNNING
# GPU-hours are billed while the deployment holds a reservation (same set, named for the ledger).
BILLABLE = HOLDS_GPUS
# The policy (idle, serving schedule, budget hard stop, archive) stops these.
STOPPABLE_BY_POLICY = RUNNING
# Stopped by someone or something and startable again.
STARTABLE = frozenset({S.STOPPED, S.FAILED})
# Has a serving revision (something was approved): changes are proposals beside it.
HAS_SERVING = RUNNING | frozenset({S.STOPPED, S.FAILED})
# Cluster-observed states the reconciler moves between among the running ones.
OBSERVED = frozenset({S.QUEUED, S.PROVISIONING, S.READY, S.DEGRADED, S.FAILED})
# Nothing more happens but deletion (DELETED: nothing at all).
FINAL = frozenset({S.REJECTED, S.CANCELLED, S.DELETED})
# Not shown in lists of what a tenant has (the deployment is gone).
GONE = frozenset({S.DELETED})
# Deleted or on its way: nothing new may point at it (an API key, an exposure).
DELETED_OR_DELETING = frozenset({S.DELETING, S.DELETED})
# A deployment in these states may be deleted by a person.
DELETABLE = frozenset(State.values) - DELETED_OR_DELETING

# Ended or waiting before anything was approved: deleting one that never ran skips the teardown.
NEVER_APPROVED = REQUESTED | frozenset({S.REJECTED, S.CANCELLED})
# Something is wrong with what runs: the timeline marks a move into these as a warning.
UNHEALTHY = frozenset({S.DEGRADED, S.FAILED})

# Every named set, for the test that classifies every state in each of them.
STATE_SETS: dict[str, frozenset[str]] = {
    "requested": REQUESTED,
    "running": RUNNING,
    "starting": STARTING,
    "serving": SERVING,
    "admitted": ADMITTED,
    "waiting": WAITING,
    "settled": SETTLED,
    "scraped": SCRAPED,
    "tear_down": TEAR_DOWN,
    "holds_gpus": HOLDS_GPUS,
    "billable": BILLABLE,
    "stoppable_by_policy": STOPPABLE_BY_POLICY,
    "startable": STARTABLE,
    "has_serving": HAS_SERVING,
    "observed": OBSERVED,
    "final": FINAL,
    "gone": GONE,
    "deleted_or_deleting": DELETED_OR_DELETING,
    "deletable": DELETABLE,
    "never_approved": NEVER_APPROVED,
    "unhealthy": UNHEALTHY,
}

# Only the first approval leaves PENDING_APPROVAL for APPROVED. STOPPED and FAILED go back to
# APPROVED through `start`, which needs no approval: the serving revision is an approved one.
# No state goes back to PENDING_APPROVAL: a change is a proposed revision, not a state.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING_APPROVAL: frozenset({S.APPROVED, S.REJECTED, S.CANCELLED, S.DELETED}),
    S.APPROVED: frozenset({S.QUEUED, S.PROVISIONING, S.READY, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING}),
    S.QUEUED: frozenset({S.APPROVED, S.PROVISIONING, S.READY, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING}),
    S.PROVISIONING: frozenset({S.APPROVED, S.QUEUED, S.READY, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING}),
    S.READY: frozenset({S.APPROVED, S.QUEUED, S.PROVISIONING, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING}),
    S.DEGRADED: frozenset({S.APPROVED, S.QUEUED, S.PROVISIONING, S.READY, S.FAILED, S.STOPPED, S.DELETING}),
    S.FAILED: frozenset({S.APPROVED, S.STOPPED, S.DELETING}),
    S.STOPPED: frozenset({S.APPROVED, S.DELETING}),
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
    APPROVE = "approve"  # decide on the proposed revision (the first one, or a change)
    REJECT = "reject"
    CANCEL = "cancel"  # withdraw a request nothing of which was ever approved
    WITHDRAW = "withdraw"  # withdraw a proposed change; the serving revision runs on untouched
    STOP = "stop"
    START = "start"
    SCALE = "scale"
    UPDATE = "update"  # propose a change (a new revision)
    ROLLBACK = "rollback"  # propose an earlier approved revision again
    DELETE = "delete"
    LOGS = "logs"  # read the engine logs (they may carry prompts and paths: not for viewers)


@dataclass(frozen=True)
class Rule:
    actors: frozenset[Actor]
    states: frozenset[str]
    # For the actions on one revision: the revision statuses the action applies to.
    revisions: frozenset[str] | None = None


_PEOPLE = frozenset({Actor.MEMBER, Actor.TENANT_ADMIN, Actor.PLATFORM_ADMIN})
_DECIDABLE = REQUESTED | HAS_SERVING
_PROPOSED = frozenset({RevisionStatus.PROPOSED})

PERMISSIONS: dict[Action, Rule] = {
    Action.APPROVE: Rule(frozenset({Actor.PLATFORM_ADMIN, Actor.POLICY}), _DECIDABLE, _PROPOSED),
    Action.REJECT: Rule(frozenset({Actor.PLATFORM_ADMIN}), _DECIDABLE, _PROPOSED),
    Action.CANCEL: Rule(_PEOPLE, REQUESTED),
    Action.WITHDRAW: Rule(_PEOPLE, HAS_SERVING, _PROPOSED),
    # The policy stops idle, out-of-schedule and over-budget deployments and starts scheduled ones
    # (deployments.policy_actions); it never cancels, edits or deletes.
    Action.STOP: Rule(_PEOPLE | {Actor.POLICY}, RUNNING | {S.FAILED}),
    Action.START: Rule(_PEOPLE | {Actor.POLICY}, STARTABLE),
    Action.SCALE: Rule(_PEOPLE, REQUESTED | HAS_SERVING),
    Action.UPDATE: Rule(_PEOPLE, REQUESTED | HAS_SERVING),
    Action.ROLLBACK: Rule(_PEOPLE, HAS_SERVING, frozenset({RevisionStatus.APPROVED})),
    Action.DELETE: Rule(_PEOPLE, DELETABLE),
    # Tenant members only: a platform admin reads the phases and Kubernetes Events instead.
    Action.LOGS: Rule(frozenset({Actor.MEMBER, Actor.TENANT_ADMIN}), frozenset(State.values) - GONE),
}
# Actions that read and change nothing: no button, no audit entry, no transition.
READ_ACTIONS = frozenset({Action.LOGS})
# Actions on one revision: their buttons sit beside that revision, not in the deployment's bar.
REVISION_ACTIONS = frozenset(a for a, rule in PERMISSIONS.items() if rule.revisions is not None)
_VERB = {Action.LOGS: "read the logs of", Action.ROLLBACK: "roll back", Action.UPDATE: "change"}


def who_may(action: Action) -> str:
    """The people the table lets take `action`, as a sentence names them ("members and tenant
    admins"): the pages say it where they leave a control out."""
    names = [a.value.replace("_", " ") + "s" for a in Actor if a in PERMISSIONS[action].actors and a != Actor.POLICY]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)


def allowed(actor: Actor | None, state: str, action: Action, revision: str | None = None) -> bool:
    """Whether the table lets `actor` take `action` now. For a revision action, `revision` is
    that revision's status (None: the action is only offered when some revision qualifies)."""
    rule = PERMISSIONS[action]
    if actor not in rule.actors or state not in rule.states:
        return False
    return rule.revisions is None or revision is None or revision in rule.revisions


def actions_for(actor: Actor | None, state: str) -> list[Action]:
    """The deployment-level actions this actor may take now, in table order (the UI's buttons)."""
    return [a for a in PERMISSIONS if a not in REVISION_ACTIONS and allowed(actor, state, a)]


def revision_actions_for(actor: Actor | None, state: str, revision: str) -> list[Action]:
    """The actions this actor may take on a revision with status `revision`."""
    return [a for a in REVISION_ACTIONS if allowed(actor, state, a, revision)]


def authorize(actor: Actor | None, state: str, action: Action, revision: str | None = None) -> None:
    """Raise Forbidden (403) when the actor may never take `action`, TransitionError (409) when
    the action does not apply in `state` (or to a revision that is `revision`)."""
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
    if rule.revisions is not None and revision is not None and revision not in rule.revisions:
        label = RevisionStatus(revision).label.lower()
        raise TransitionError(f"Cannot {_VERB.get(action, action.value)} a revision that is {label}.")
