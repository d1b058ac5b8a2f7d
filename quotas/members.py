"""Memberships: who belongs to a tenant, in which role, and who may change that.

Platform admins manage every tenant's members. A tenant admin manages the members of the tenants
they administer, never a platform admin's membership (adding, changing or removing it), and
never another tenant. At sign-in through the identity provider, `memberships_sync_from_idp`
makes the memberships the provider's groups grant match them (see portal.oidc).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction

from core.exceptions import ConflictError, DomainError, Forbidden
from core.identity import users_with_email
from core.models import audit
from quotas.choices import MembershipSource, Role
from quotas.models import PLATFORM_ADMIN_GROUP, Membership, Tenant, is_platform_admin

IDP_ACTOR = "identity-provider"  # the audit log's actor for changes made from a sign-in's groups
SIGN_IN = "Identity-provider groups at sign-in."
# The two ways a provider manages memberships: its groups at each sign-in, and SCIM provisioning
# (portal.scim). Each manages its own; neither takes over or removes the other's.
PROVIDER_SOURCES = (MembershipSource.IDP, MembershipSource.SCIM)


def can_manage_members(tenant: Tenant, user) -> bool:
    """Platform admins, and the tenant's own admins."""
    return is_platform_admin(user) or tenant.role_of(user) == Role.TENANT_ADMIN


def can_invite(user) -> bool:
    """Platform admins only. An account is platform-wide (it may join any tenant, and with an
    identity provider people get theirs at their first sign-in), so creating one is not a
    tenant's decision: a tenant admin asks a platform admin (portal.accounts.user_invite), then
    adds the person here."""
    return is_platform_admin(user)


def no_account_error(identifier: str, actor) -> DomainError:
    """The refusal for a person without an account: what to do next, for this actor."""
    step = (
        "invite them first (Platform, Invite a person), then add them here"
        if can_invite(actor)
        else "they sign in once through the identity provider, or a platform admin invites them; then add them here"
    )
    return DomainError(
        f"No one with the username or e-mail {identifier!r} has an account yet: {step}.",
        field="user",
        code="no_account",
    )


def _guard(tenant: Tenant, actor, target=None) -> None:
    if not can_manage_members(tenant, actor):
        raise Forbidden("Only platform admins and this tenant's admins manage its members.")
    if tenant.archived:
        raise ConflictError("This tenant is archived.", code="archived")
    if target is not None and is_platform_admin(target) and not is_platform_admin(actor):
        raise Forbidden("Only platform admins manage a platform admin's membership.")


def _role(role: str) -> str:
    if role not in Role.values:
        raise DomainError(f"Choose one of: {', '.join(Role.values)}.", field="role")
    return role


def find_user(identifier: str, *, actor=None):
    """The active user with this username, or else with this e-mail address (the one matching
    rule, core.identity: the local part exactly, the domain ignoring case). The refusal for no
    such person tells `actor` what to do next."""
    users = get_user_model().objects.filter(is_active=True)
    identifier = (identifier or "").strip()
    if not identifier or len(identifier) > 254:
        raise DomainError("Enter a username or an e-mail address.", field="user")
    match = users.filter(username=identifier).first()
    if match is None and "@" in identifier:
        found = users_with_email(users, identifier)
        if len(found) > 1:
            raise DomainError("Several people have this e-mail address; use the username.", field="user")
        match = found[0] if found else None
    if match is None:
        raise no_account_error(identifier, actor)
    return match


@transaction.atomic
def membership_add(*, tenant: Tenant, actor, user: str, role: str, reason: str = "") -> Membership:
    """Add a person (by username or e-mail) to the tenant in `role`."""
    if not can_manage_members(tenant, actor):  # before looking anyone up: no probing for accounts
        raise Forbidden("Only platform admins and this tenant's admins manage its members.")
    target = find_user(user, actor=actor)
    _guard(tenant, actor, target)
    try:
        with transaction.atomic():
            membership = Membership.objects.create(tenant=tenant, user=target, role=_role(role))
    except IntegrityError:
        raise ConflictError(f"{target.username} is already a member of {tenant.slug}.", field="user") from None
    audit(
        actor=actor,
        action="membership.add",
        obj=membership,
        tenant=tenant,
        reason=reason,
        changes={"user": target.username, "from": None, "to": membership.role},
    )
    return membership


def _keeps_an_admin(tenant: Tenant, membership: Membership, new_role: str | None) -> None:
    """The one rule for the last tenant admin: no removal or demotion (by themselves or anyone
    else) may leave the tenant without an active tenant admin.

    Race-safe: the caller holds the tenant row's lock (`_locked`), so two admins demoting each
    other (or themselves) at once are serialised and the second counts after the first commits."""
    if membership.role != Role.TENANT_ADMIN or new_role == Role.TENANT_ADMIN:
        return
    others = Membership.objects.filter(tenant=tenant, role=Role.TENANT_ADMIN, user__is_active=True)
    if not others.exclude(pk=membership.pk).exists():
        raise DomainError(
            f"{membership.user.username} is the last tenant admin of {tenant.slug}: make someone else "
            "tenant admin first.",
            field="role" if new_role else "user",
            code="last_tenant_admin",
        )


def _locked(tenant: Tenant, username: str) -> Membership:
    # The tenant row first, then the membership: every path that changes an admin's role takes
    # the locks in this order (see _keeps_an_admin), so two of them cannot deadlock.
    Tenant.objects.select_for_update(no_key=True).filter(pk=tenant.pk).first()
    membership = (
        Membership.objects.select_for_update(of=("self",), no_key=True)
        .select_related("user")
        .filter(tenant=tenant, user__username=username)
        .first()
    )
    if membership is None:
        raise DomainError(f"{username!r} is not a member of {tenant.slug}.", field="user", code="not_found")
    return membership


@transaction.atomic
def membership_set_role(*, tenant: Tenant, actor, username: str, role: str, reason: str = "") -> Membership:
    """Change a member's role."""
    if not can_manage_members(tenant, actor):
        raise Forbidden("Only platform admins and this tenant's admins manage its members.")
    membership = _locked(tenant, username)
    _guard(tenant, actor, membership.user)
    before = membership.role
    _keeps_an_admin(tenant, membership, _role(role))
    membership.role = _role(role)
    if before != membership.role:
        membership.save(update_fields=["role"])
        audit(
            actor=actor,
            action="membership.role",
            obj=membership,
            tenant=tenant,
            reason=reason,
            changes={"user": username, "from": before, "to": membership.role},
        )
    return membership


@transaction.atomic
def membership_remove(*, tenant: Tenant, actor, username: str, reason: str = "") -> None:
    """Remove a member from the tenant (their deployments stay with the tenant)."""
    if not can_manage_members(tenant, actor):
        raise Forbidden("Only platform admins and this tenant's admins manage its members.")
    membership = _locked(tenant, username)
    _guard(tenant, actor, membership.user)
    _keeps_an_admin(tenant, membership, None)
    audit(
        actor=actor,
        action="membership.remove",
        obj=membership,
        tenant=tenant,
        reason=reason,
        changes={"user": username, "from": membership.role, "to": None},
    )
    membership.delete()


@transaction.atomic
def memberships_sync_from_idp(
    *,
    user,
    roles: dict[str, str],
    source: str = MembershipSource.IDP,
    actor: str = IDP_ACTOR,
    reason: str = SIGN_IN,
) -> dict[str, tuple[str | None, str | None]]:
    """Make the user's memberships managed by `source` match `roles` (tenant slug → role), as the
    identity provider's groups grant them at this sign-in (or its SCIM groups, portal.scim).

    Memberships the groups grant are created or updated (a membership added by hand that a group
    now covers becomes managed by `source`); those managed by `source` whose group is gone are
    removed; memberships added by hand and not covered by a group, and those the other provider
    source manages, are left alone. Archived and unknown tenants are skipped. Returns what
    changed: slug → (old role, new role).
    """
    foreign = set(PROVIDER_SOURCES) - {source}
    tenants = {t.slug: t for t in Tenant.objects.filter(slug__in=roles, archived_at__isnull=True)}
    current = {m.tenant.slug: m for m in Membership.objects.select_for_update(of=("self",)).filter(user=user)}
    changed: dict[str, tuple[str | None, str | None]] = {}
    for slug, role in roles.items():
        if slug not in tenants or role not in Role.values:
            continue
        membership = current.get(slug)
        if membership is None:
            membership = Membership.objects.create(user=user, tenant=tenants[slug], role=role, source=source)
            changed[slug] = (None, role)
        elif membership.source not in foreign and (membership.role, membership.source) != (role, source):
            if membership.role != role:
                changed[slug] = (membership.role, role)
            membership.role, membership.source = role, source
            membership.save(update_fields=["role", "source"])
    for slug, membership in current.items():
        if membership.source == source and slug not in roles:
            changed[slug] = (membership.role, None)
            membership.delete()
    for slug, (old, new) in changed.items():
        tenant = tenants.get(slug) or current[slug].tenant
        audit(
            actor=actor,
            action="membership.sync",
            obj=user,
            tenant=tenant,
            reason=reason,
            changes={"user": user.username, "from": old, "to": new},
        )
    return changed


@transaction.atomic
def platform_admin_sync_from_idp(*, user, is_admin: bool, actor: str = IDP_ACTOR, reason: str = SIGN_IN) -> bool | None:
    """Put the user in the platform-admins group, or take them out, as the provider's groups say.
    Staff and superusers are platform admins by their flags, which this never changes. Returns
    the new standing when it changed, None when it did not."""
    group, _ = Group.objects.get_or_create(name=PLATFORM_ADMIN_GROUP)
    member = user.groups.filter(pk=group.pk).exists()
    if member == is_admin:
        return None
    if is_admin:
        user.groups.add(group)
    else:
        user.groups.remove(group)
    user.__dict__.pop("_is_platform_admin", None)
    audit(
        actor=actor,
        action="platform_admin.grant" if is_admin else "platform_admin.revoke",
        obj=user,
        reason=reason,
        changes={"user": user.username, "from": member, "to": is_admin},
    )
    return is_admin
