"""Who acts on a tenant's things: a person's role in the tenant, a platform admin, or the tenant's
policy. One list for every (role, state, action) table: deployments (deployments.states), keys
(access.permissions) and tenant credentials (quotas.tenant_secrets)."""

from __future__ import annotations

from enum import StrEnum


class Actor(StrEnum):
    """Who acts on a deployment: a person's role in its tenant, a platform admin, or the policy."""

    VIEWER = "viewer"
    MEMBER = "member"
    TENANT_ADMIN = "tenant_admin"
    PLATFORM_ADMIN = "platform_admin"
    # The tenant's policy: auto-approval, idle stop, serving schedule, budget hard stop, archive.
    # Recorded as the actor "policy" in the timeline and the audit log.
    POLICY = "policy"


def actor_of(tenant, user) -> Actor | None:
    """The user's standing for a deployment of `tenant` (None: not a member, not an admin)."""
    from quotas.models import is_platform_admin

    if is_platform_admin(user):
        return Actor.PLATFORM_ADMIN
    role = tenant.role_of(user)
    return Actor(role) if role else None
