"""The deployment lifecycle: one table of allowed transitions, checked by every service.

The reconciler drives queued / provisioning / ready / degraded / failed from what the cluster
reports; people drive the rest (approve, reject, cancel, stop, start, delete).
"""

from __future__ import annotations

from deployments.choices import State
from portal.exceptions import TransitionError

S = State

# Desired state "running": the runtime should make the workload exist and converge.
RUNNING = frozenset({S.APPROVED, S.QUEUED, S.PROVISIONING, S.READY, S.DEGRADED})
# States in which the deployment holds a quota reservation.
HOLDS_QUOTA = RUNNING | {S.DELETING}
TERMINAL = frozenset({S.DELETED})
# Cluster-observed states the reconciler may move between freely among RUNNING ones.
OBSERVED = frozenset({S.QUEUED, S.PROVISIONING, S.READY, S.DEGRADED, S.FAILED})

TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING_APPROVAL: frozenset({S.APPROVED, S.REJECTED, S.CANCELLED, S.DELETED}),
    S.APPROVED: frozenset({S.QUEUED, S.PROVISIONING, S.READY, S.DEGRADED, S.FAILED, S.STOPPED,
                           S.DELETING, S.PENDING_APPROVAL}),
    S.QUEUED: frozenset({S.PROVISIONING, S.READY, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING,
                         S.PENDING_APPROVAL, S.APPROVED}),
    S.PROVISIONING: frozenset({S.QUEUED, S.READY, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING,
                               S.PENDING_APPROVAL, S.APPROVED}),
    S.READY: frozenset({S.QUEUED, S.PROVISIONING, S.DEGRADED, S.FAILED, S.STOPPED, S.DELETING,
                        S.PENDING_APPROVAL, S.APPROVED}),
    S.DEGRADED: frozenset({S.QUEUED, S.PROVISIONING, S.READY, S.FAILED, S.STOPPED, S.DELETING,
                           S.PENDING_APPROVAL, S.APPROVED}),
    S.FAILED: frozenset({S.APPROVED, S.STOPPED, S.DELETING, S.PENDING_APPROVAL}),
    S.STOPPED: frozenset({S.APPROVED, S.DELETING, S.PENDING_APPROVAL}),
    S.DELETING: frozenset({S.DELETED}),
    S.REJECTED: frozenset({S.DELETED, S.PENDING_APPROVAL}),
    S.CANCELLED: frozenset({S.DELETED}),
    S.DELETED: frozenset(),
}


def can_transition(current: str, target: str) -> bool:
    return target in TRANSITIONS.get(current, frozenset())


def check_transition(current: str, target: str) -> None:
    """Raise TransitionError (HTTP 409) when `current` → `target` is not allowed."""
    if not can_transition(current, target):
        raise TransitionError(
            f"Cannot go from {State(current).label.lower()} to {State(target).label.lower()}."
        )
