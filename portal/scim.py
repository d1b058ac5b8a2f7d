"""SCIM 2.0 provisioning: the identity provider creates, changes and deactivates accounts and
pushes its groups, so a leaver loses access without ever signing in again (portal.scim_views
speaks the protocol; this module holds the services).

Groups: a SCIM group's display name grants what the same name grants at an OpenID sign-in
(portal.oidc_groups): a name listed in OIDC_GROUP_ROLES its grants, a name of the form
"tenant-slug:role" that role in that tenant, a name in OIDC_PLATFORM_ADMIN_GROUPS the
platform-admin standing (when that setting is set). Any other name is accepted and stored, and
grants nothing: a provider pushes every group assigned to the application, and refusing one would
stop it provisioning the rest. After each change the memberships of the people concerned are made
to match their groups (quotas.members.memberships_sync_from_idp, source "scim"): a membership the
groups no longer grant is deleted, and portal.deprovision revokes the person's tokens and keys.
As at sign-in, the last-tenant-admin rule does not apply: the provider is the source of truth.

Deactivating (active false, or DELETE) saves the account inactive; portal.deprovision revokes
every token and key. Every change is audited with the actor "scim".
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from core.exceptions import ConflictError, DomainError
from core.identity import users_with_email
from core.models import audit
from portal.accounts import _check_email, _check_username  # the portal's one rule for each
from portal.models import ScimGroup
from portal.oidc_groups import grant_named, roles_for
from quotas.choices import MembershipSource
from quotas.members import memberships_sync_from_idp, platform_admin_sync_from_idp

SCIM_ACTOR = "scim"
REASON = "SCIM provisioning by the identity provider."
USER_FIELDS = ("username", "email", "first_name", "last_name", "is_active")
NAME_MAX = 150  # auth.User's first_name and last_name


def _clean_user(changes: dict) -> dict:
    clean = {}
    for field, value in changes.items():
        if isinstance(value, str) and "\x00" in value:  # PostgreSQL stores no NUL in text
            raise DomainError("No NUL characters.", field=field)
        if field == "username":
            value = _check_username(value if isinstance(value, str) else "")
        elif field == "email":
            value = _check_email(value) if value else ""
        elif field in ("first_name", "last_name"):
            if not isinstance(value, str) or len(value) > NAME_MAX:
                raise DomainError(f"At most {NAME_MAX} characters.", field=field)
        elif field == "is_active" and not isinstance(value, bool):
            raise DomainError("true or false.", field="active")
        clean[field] = value
    return clean


def _check_free(user, clean: dict) -> None:
    users = get_user_model().objects.exclude(pk=getattr(user, "pk", None))
    if "username" in clean and users.filter(username=clean["username"]).exists():
        raise ConflictError(f"{clean['username']!r} already has an account.", field="userName", code="uniqueness")
    if clean.get("email") and users_with_email(users.filter(is_active=True), clean["email"]):
        raise ConflictError(
            "Someone already has an account with this e-mail address.", field="emails", code="uniqueness"
        )


@transaction.atomic
def scim_user_create(*, changes: dict):
    """Create an account (no password: the person signs in through the provider)."""
    clean = _clean_user(changes)
    if "username" not in clean:
        raise DomainError("userName is required.", field="userName")
    _check_free(None, clean)
    user = get_user_model()(**clean)
    user.set_unusable_password()
    user.save()
    audit(actor=SCIM_ACTOR, action="user.provision", obj=user, reason=REASON, changes=_loggable(clean))
    return user


@transaction.atomic
def scim_user_update(*, user_id: int, changes: dict):
    """Change an account's attributes; `is_active` False deactivates it (portal.deprovision then
    revokes every token and key, inside this transaction)."""
    user = get_user_model().objects.select_for_update().get(pk=user_id)
    clean = {field: value for field, value in _clean_user(changes).items() if getattr(user, field) != value}
    if not clean:
        return user
    _check_free(user, clean)
    before = {field: getattr(user, field) for field in clean}
    for field, value in clean.items():
        setattr(user, field, value)
    user.save(update_fields=list(clean))
    audit(
        actor=SCIM_ACTOR,
        action="user.deactivate" if clean.get("is_active") is False else "user.update",
        obj=user,
        reason=REASON,
        changes={"user": user.username, "from": _loggable(before), "to": _loggable(clean)},
    )
    return user


def _loggable(values: dict) -> dict:
    return {field: values[field] for field in USER_FIELDS if field in values}


def _grants(names: list[str]) -> dict[str, str]:
    mapping = {}
    for name in names:
        grant = grant_named(name)
        mapping[name] = settings.OIDC_GROUP_ROLES.get(name) or ((grant,) if grant else ())
    return roles_for(names, mapping)


def _sync(user_ids) -> None:
    """Make each person's memberships (and platform-admin standing) match their SCIM groups."""
    # Each person's row locked (in pk order: no deadlock) before their groups are read: two
    # changes to different groups of one person then run one after the other, and the second
    # reads the groups the first committed, so a removal is never undone by a stale read.
    people = get_user_model().objects.select_for_update(no_key=True).filter(pk__in=set(user_ids)).order_by("pk")
    for user in people:
        names = list(user.scim_groups.values_list("display_name", flat=True))
        memberships_sync_from_idp(
            user=user, roles=_grants(names), source=MembershipSource.SCIM, actor=SCIM_ACTOR, reason=REASON
        )
        if settings.OIDC_PLATFORM_ADMIN_GROUPS:
            is_admin = bool(set(settings.OIDC_PLATFORM_ADMIN_GROUPS) & set(names))
            platform_admin_sync_from_idp(user=user, is_admin=is_admin, actor=SCIM_ACTOR, reason=REASON)


def _members(user_ids) -> set[int]:
    ids = set(user_ids)
    found = set(get_user_model().objects.filter(pk__in=ids).values_list("pk", flat=True))
    if found != ids:
        raise DomainError(f"No account with id {sorted(ids - found)[0]}.", field="members")
    return found


def _display_name(value) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 255 or "\x00" in value:
        raise DomainError("A name of 1 to 255 characters.", field="displayName")
    return value


@transaction.atomic
def scim_group_create(*, display_name, external_id: str = "", member_ids=()) -> ScimGroup:
    """Create a group with its members, and grant what its name grants."""
    name = _display_name(display_name)
    members = _members(member_ids)
    if ScimGroup.objects.filter(display_name=name).exists():
        raise ConflictError(f"A group named {name!r} exists.", field="displayName", code="uniqueness")
    external_id = external_id.replace("\x00", "")[:255] if isinstance(external_id, str) else ""
    group = ScimGroup.objects.create(display_name=name, external_id=external_id)
    group.members.set(members)
    _sync(members)
    changes = {"group": name, "members": sorted(members)}
    audit(actor=SCIM_ACTOR, action="scim_group.create", obj=group, reason=REASON, changes=changes)
    return group


MEMBER_STEPS = {
    "add": lambda members, ids: members | ids,
    "remove": lambda members, ids: members - ids,
    "replace": lambda members, ids: ids,
}


@transaction.atomic
def scim_group_change(*, group_id: int, display_name=None, steps=()) -> ScimGroup:
    """Rename a group and change its members: `steps` ("add" | "remove" | "replace", user ids)
    apply in order to the members under the group's lock, so concurrent changes all count; then
    the memberships of everyone who was or is in it follow."""
    group = ScimGroup.objects.select_for_update().get(pk=group_id)
    before = set(group.members.values_list("pk", flat=True))
    after = before
    for step, ids in steps:
        after = MEMBER_STEPS[step](after, set(ids) if step == "remove" else _members(ids))
    name = group.display_name if display_name is None else _display_name(display_name)
    if name != group.display_name:
        if ScimGroup.objects.filter(display_name=name).exclude(pk=group.pk).exists():
            raise ConflictError(f"A group named {name!r} exists.", field="displayName", code="uniqueness")
        group.display_name = name
        group.save(update_fields=["display_name", "modified"])
    group.members.set(after)
    _sync(before | after)
    audit(
        actor=SCIM_ACTOR,
        action="scim_group.change",
        obj=group,
        reason=REASON,
        changes={"group": name, "added": sorted(after - before), "removed": sorted(before - after)},
    )
    return group


@transaction.atomic
def scim_group_delete(*, group_id: int) -> None:
    """Delete a group; its members lose what it granted."""
    group = ScimGroup.objects.select_for_update().get(pk=group_id)
    members = set(group.members.values_list("pk", flat=True))
    audit(
        actor=SCIM_ACTOR,
        action="scim_group.delete",
        obj=group,
        reason=REASON,
        changes={"group": group.display_name, "members": sorted(members)},
    )
    group.delete()
    _sync(members)
