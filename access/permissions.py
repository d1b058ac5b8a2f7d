"""Who may do what with API keys: one (role, action) table, read by the services, API and pages.

Viewers see a tenant's keys' names, prefixes and dates (nothing secret: the key itself is shown
once, to its maker, and only its digest is kept); members mint keys for their tenant and revoke
their own; tenant admins revoke any key of the tenant; platform admins everything. A key lives
only as long as its maker may mint it: leaving the tenant, a role that no longer mints,
deactivation or deletion revokes it (portal.deprovision, at once; the keys sweep, as a backstop).
"""

from __future__ import annotations

from enum import StrEnum

from core.exceptions import Forbidden
from deployments.states import Actor, actor_of


class KeyAction(StrEnum):
    LIST = "list"
    MINT = "mint"
    REVOKE_OWN = "revoke_own"
    REVOKE_ANY = "revoke_any"


_PEOPLE = frozenset({Actor.MEMBER, Actor.TENANT_ADMIN, Actor.PLATFORM_ADMIN})

PERMISSIONS: dict[KeyAction, frozenset[Actor]] = {
    KeyAction.LIST: _PEOPLE | {Actor.VIEWER},
    KeyAction.MINT: _PEOPLE,
    KeyAction.REVOKE_OWN: _PEOPLE,
    KeyAction.REVOKE_ANY: frozenset({Actor.TENANT_ADMIN, Actor.PLATFORM_ADMIN}),
}
_MINTERS = PERMISSIONS[KeyAction.MINT]


def allowed(actor: Actor | None, action: KeyAction) -> bool:
    return actor in PERMISSIONS[action]


def _names(actors) -> str:
    """Tenant roles in the table's order, as a sentence names them: "a member or tenant admin"."""
    roles = [actor.value.replace("_", " ") for actor in Actor if actor in actors and actor != Actor.PLATFORM_ADMIN]
    return "a " + " or ".join(roles) if roles else "a platform admin"


def mint_note() -> str:
    """Why a reader sees no mint control (the pages show it where they leave the control out)."""
    readers = [a.value.replace("_", " ") + "s" for a in Actor if a in PERMISSIONS[KeyAction.LIST] - _MINTERS]
    who = " and ".join(readers).capitalize() or "Readers"
    return f"{who} can read keys' names, dates and status; {_names(_MINTERS)} of the tenant mints keys."


def revoke_note() -> str:
    """Who revokes which key (shown where a key's Revoke button is left out)."""
    own = _names(PERMISSIONS[KeyAction.REVOKE_OWN] - PERMISSIONS[KeyAction.REVOKE_ANY])
    anyone = _names(PERMISSIONS[KeyAction.REVOKE_ANY])
    return f"{own.capitalize()} revokes the keys they made; {anyone} revokes any key of the tenant."


def mint_tenants(user):
    """The tenants the user may mint keys for now: visible, not archived, a minting role."""
    from quotas.models import Tenant

    tenants = Tenant.objects.visible_to(user).filter(archived_at__isnull=True)
    return Tenant.objects.filter(pk__in=[t.pk for t in tenants if allowed(actor_of(t, user), KeyAction.MINT)])


def minting_roles() -> list[str]:
    """The tenant roles that mint keys (platform admins mint besides). A key opens an endpoint only
    while its maker may still mint it: ApiKeyQuerySet.unentitled reads this."""
    return [actor.value for actor in PERMISSIONS[KeyAction.MINT] if actor != Actor.PLATFORM_ADMIN]


def may_revoke(user, key) -> bool:
    """A tenant admin (or platform admin) revokes any key of the tenant; others their own."""
    actor = actor_of(key.tenant, user)
    return allowed(actor, KeyAction.REVOKE_ANY) or (
        allowed(actor, KeyAction.REVOKE_OWN) and key.created_by_id is not None and key.created_by_id == user.pk
    )


def authorize_mint(tenant, user) -> None:
    if not allowed(actor_of(tenant, user), KeyAction.MINT):
        raise Forbidden("Only members of the tenant may mint API keys for it.")


def authorize_revoke(user, key) -> None:
    if not may_revoke(user, key):
        raise Forbidden("Only the key's maker or a tenant admin may revoke it.")
