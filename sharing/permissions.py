"""Who may do what with shared models: one (side, role, state, action) table, read by the
services, the API and the pages.

A publication belongs to its deployment's tenant (the owner side); a subscription to the consuming
tenant (the consumer side). Tenant admins act for their side, platform admins for both; members and
viewers read. `states` names the subscription states an action applies to (None: there is no
subscription yet), or, for publish and unpublish, the publication's ("unpublished" covers a
deployment never published).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core.exceptions import Forbidden, TransitionError
from quotas.actors import Actor
from sharing.models import SubscriptionState as Sub

# The named sets of subscription states (the only place they are written).
OPEN = frozenset({Sub.REQUESTED, Sub.ACTIVE})  # counts as the consumer's: names, the owner's list
CLOSED = frozenset({Sub.REFUSED, Sub.ENDED})  # the consumer may ask again
PUBLISHED, UNPUBLISHED = "published", "unpublished"


class ShareAction(StrEnum):
    PUBLISH = "publish"  # publish, or change the audience, policy and default limits
    UNPUBLISH = "unpublish"
    SUBSCRIBE = "subscribe"
    APPROVE = "approve"
    REFUSE = "refuse"
    SET_LIMITS = "set_limits"
    CANCEL = "cancel"  # the consumer ends its subscription
    END = "end"  # the owner ends a consumer's subscription


class Side(StrEnum):
    OWNER = "owner"
    CONSUMER = "consumer"


@dataclass(frozen=True)
class Rule:
    side: Side
    actors: frozenset[Actor]
    states: frozenset


_ADMINS = frozenset({Actor.TENANT_ADMIN, Actor.PLATFORM_ADMIN})

PERMISSIONS: dict[ShareAction, Rule] = {
    ShareAction.PUBLISH: Rule(Side.OWNER, _ADMINS, frozenset({PUBLISHED, UNPUBLISHED})),
    ShareAction.UNPUBLISH: Rule(Side.OWNER, _ADMINS, frozenset({PUBLISHED})),
    ShareAction.SUBSCRIBE: Rule(Side.CONSUMER, _ADMINS, frozenset({None}) | CLOSED),
    ShareAction.APPROVE: Rule(Side.OWNER, _ADMINS, frozenset({Sub.REQUESTED})),
    ShareAction.REFUSE: Rule(Side.OWNER, _ADMINS, frozenset({Sub.REQUESTED})),
    ShareAction.SET_LIMITS: Rule(Side.OWNER, _ADMINS, OPEN),
    ShareAction.CANCEL: Rule(Side.CONSUMER, _ADMINS, OPEN),
    ShareAction.END: Rule(Side.OWNER, _ADMINS, frozenset({Sub.ACTIVE})),
}


def allowed(actor: Actor | None, action: ShareAction, state) -> bool:
    rule = PERMISSIONS[action]
    return actor in rule.actors and state in rule.states


def authorize(actor: Actor | None, action: ShareAction, state) -> None:
    """Forbidden when the role may not act on this side; TransitionError (409) when it may, but
    not in this state."""
    rule = PERMISSIONS[action]
    if actor not in rule.actors:
        raise Forbidden(f"Only a tenant admin of the {rule.side.value}'s tenant or a platform admin may do this.")
    if state not in rule.states:
        what = "the deployment" if action in (ShareAction.PUBLISH, ShareAction.UNPUBLISH) else "the subscription"
        shown = "not there" if state is None else f"{state}"
        raise TransitionError(f"Cannot {action.value.replace('_', ' ')} now: {what} is {shown}.")


def actions_for(actor: Actor | None, side: Side, state) -> list[ShareAction]:
    """The actions whose buttons a page shows this actor on this side, in the table's order."""
    return [a for a, rule in PERMISSIONS.items() if rule.side == side and allowed(actor, a, state)]
