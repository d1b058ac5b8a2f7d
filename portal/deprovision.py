"""Deprovisioning: a person who leaves loses their endpoint keys and API tokens at once.

What goes, by what happened:

- A membership deleted (members.membership_remove from the UI, the API or the Django admin; a
  group gone at the next OpenID sign-in, members.memberships_sync_from_idp; a deleted account's
  cascade): every API token of the person, and their keys for tenants where they may no longer
  mint keys (access.services.keys_revoke_unentitled; a platform admin keeps theirs). A token
  carries every tenant its holder belongs to and cannot be narrowed to the others, and it may
  sit in the automation of the team just left.
- A role changed (member → viewer) or the platform-admin standing lost (the group, the staff or
  superuser flag): the keys they may no longer mint. Tokens stay: what a token may do is checked
  at each request against the person's standing then.
- An account deactivated (`is_active` False, by any path that saves the row: the Django admin, a
  shell, a management command): every token and every key.
- An account deleted: every key (the tokens go with the row).

The triggers are model signals, so no path through the ORM's save, delete or many-to-many
methods is missed. Each runs inside the transaction that made the change: the revocations
commit, or roll back, with it, and the keys are withdrawn from the gateway and the local
engines after the commit (access.tasks.withdraw_key_task). A bulk `update()` sends no signal:
the keys sweep (access.tasks.expire_keys_task, every minute) revokes those keys, and knox
refuses an inactive account's tokens at each request anyway. Every revocation is audited with
the actor "system" and the reason.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete

from access.services import keys_revoke_of_maker, keys_revoke_unentitled
from portal.api import ApiToken, token_revoke
from quotas.models import Membership


@transaction.atomic
def person_leaves(*, user_id: int, reason: str) -> None:
    """Revoke every API token of the person and the keys they may no longer mint."""
    for token in ApiToken.objects.filter(user_id=user_id).order_by("pk"):
        token_revoke(user="system", token=token, reason=reason)
    keys_revoke_unentitled(maker_id=user_id, reason=reason)


def _membership_deleted(sender, instance, **kwargs) -> None:
    person_leaves(user_id=instance.user_id, reason=f"Left tenant {instance.tenant.slug}.")


def _membership_saved(sender, instance, created, **kwargs) -> None:
    if not created:
        reason = f"Role in {instance.tenant.slug} is now {instance.role}."
        keys_revoke_unentitled(maker_id=instance.user_id, reason=reason)


def _user_saved(sender, instance, created, update_fields=None, **kwargs) -> None:
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return  # a new account holds nothing; a sign-in changes no standing
    if not instance.is_active:
        person_leaves(user_id=instance.pk, reason="Account deactivated.")
    else:
        keys_revoke_unentitled(maker_id=instance.pk, reason="No longer a platform admin.")


def _user_deleted(sender, instance, **kwargs) -> None:
    keys_revoke_of_maker(maker_id=instance.pk, reason="Account deleted.")


def _groups_changed(sender, instance, action, reverse, pk_set, **kwargs) -> None:
    """user.groups.remove/clear/set, or group.user_set.…: the platform-admin group may be gone."""
    if action == "pre_clear" and reverse:  # the group's members, before the link rows go
        instance._deprovision_users = list(instance.user_set.values_list("pk", flat=True))
    if action not in ("post_remove", "post_clear"):
        return
    user_ids = (pk_set or getattr(instance, "_deprovision_users", [])) if reverse else [instance.pk]
    for user_id in sorted(user_ids):
        keys_revoke_unentitled(maker_id=user_id, reason="No longer a platform admin.")


def connect() -> None:
    """Connect the triggers (PortalConfig.ready)."""
    user = get_user_model()
    post_delete.connect(_membership_deleted, sender=Membership, dispatch_uid="deprovision-membership-deleted")
    post_save.connect(_membership_saved, sender=Membership, dispatch_uid="deprovision-membership-saved")
    post_save.connect(_user_saved, sender=user, dispatch_uid="deprovision-user-saved")
    pre_delete.connect(_user_deleted, sender=user, dispatch_uid="deprovision-user-deleted")
    m2m_changed.connect(_groups_changed, sender=user.groups.through, dispatch_uid="deprovision-groups")
