"""People without the identity provider: the first platform admin from configuration, and
invitations (a one-time link where the invitee sets their own password). No kubectl for people.

The first platform admin: PLATFORM_ADMIN_USERNAME (+ PLATFORM_ADMIN_EMAIL) names the account,
PLATFORM_ADMIN_PASSWORD_FILE a Secret-mounted file with its first password (not needed with OIDC:
the person signs in there with that e-mail address). `platform_admin_bootstrap` runs after every
`migrate` (the migrate Job, compose's migrate service) and from `manage.py bootstrap_platform_admin`:
it creates the account once, never resets its password, and keeps it a platform admin.

Invitations: a platform admin names a username and an e-mail address; the account is created
without a usable password and the link carries Django's password-reset token (HMAC with
SECRET_KEY over the account's password hash, last sign-in and e-mail): it expires after
INVITE_TTL_HOURS (PASSWORD_RESET_TIMEOUT) and dies the moment a password is set or the person
signs in, so it works once. Inviting the same pending person again makes earlier links invalid.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import validate_password
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from core.exceptions import DomainError, Forbidden
from core.identity import users_with_email
from core.models import audit
from quotas.members import can_invite
from quotas.models import PLATFORM_ADMIN_GROUP

CONFIGURATION = "configuration"  # the audit log's actor for what the settings decided


class InviteTokenGenerator(PasswordResetTokenGenerator):
    """Django's password-reset tokens, under their own salt: a reset link is no invitation."""

    key_salt = "portal.accounts.InviteTokenGenerator"


invite_tokens = InviteTokenGenerator()


class BootstrapError(Exception):
    """The configuration names a first platform admin that cannot be created; the message says why."""


def _check_username(username: str) -> str:
    username = (username or "").strip()
    try:
        if not username or len(username) > 150:
            raise ValidationError("Enter a username of at most 150 characters.")
        UnicodeUsernameValidator()(username)
    except ValidationError as error:
        raise DomainError(error.messages[0], field="username") from None
    return username


def _check_email(email: str) -> str:
    email = get_user_model().objects.normalize_email((email or "").strip())
    try:
        validate_email(email)
    except ValidationError:
        raise DomainError("Enter a valid e-mail address.", field="email") from None
    return email


def invite_path(user) -> str:
    """The invitation link's path for `user` (valid until it is used or expires)."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return reverse("invite-accept", kwargs={"uidb64": uid, "token": invite_tokens.make_token(user)})


@transaction.atomic
def user_invite(*, actor, username: str, email: str, reason: str = ""):
    """Invite a person: their account without a usable password, and the link's path.
    Returns (user, path, expires)."""
    if not can_invite(actor):
        raise Forbidden("Only platform admins invite people.")
    User = get_user_model()
    username, email = _check_username(username), _check_email(email)
    user = User.objects.select_for_update().filter(username=username).first()
    if user is not None and (user.has_usable_password() or user.last_login or user.email != email):
        raise DomainError(f"{username!r} already has an account.", field="username", code="taken")
    if user is None:
        if users_with_email(User.objects.filter(is_active=True), email):
            raise DomainError("Someone already has an account with this e-mail address.", field="email", code="taken")
        user = User.objects.create_user(username, email=email)  # no password: unusable
    else:
        user.set_unusable_password()  # a new random marker: the earlier links stop working
        user.save(update_fields=["password"])
    expires = timezone.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT)
    audit(
        actor=actor,
        action="user.invite",
        obj=user,
        reason=reason,
        changes={"user": username, "email": email, "expires": expires.isoformat()},
    )
    return user, invite_path(user), expires


def platform_admin_bootstrap() -> str | None:
    """Apply PLATFORM_ADMIN_USERNAME: create the account if missing and keep it a platform admin.
    Returns what it did ("created", "granted"), None when there was nothing to do."""
    username = settings.PLATFORM_ADMIN_USERNAME
    if not username:
        return None
    User = get_user_model()
    with transaction.atomic():
        group, _ = Group.objects.get_or_create(name=PLATFORM_ADMIN_GROUP)
        user = User.objects.select_for_update().filter(username=username).first()
        done = None
        if user is None:
            user = User.objects.create_user(username, email=settings.PLATFORM_ADMIN_EMAIL or "")
            _first_password(user)
            done = "created"
        if not user.groups.filter(pk=group.pk).exists():
            user.groups.add(group)
            done = done or "granted"
            audit(
                actor=CONFIGURATION,
                action="platform_admin.grant",
                obj=user,
                reason="PLATFORM_ADMIN_USERNAME",
                changes={"user": username, "from": False, "to": True},
            )
    return done


def _first_password(user) -> None:
    path = settings.PLATFORM_ADMIN_PASSWORD_FILE
    if not path:
        if settings.OIDC_ENABLED and user.email:
            return  # they sign in through the identity provider (matched by e-mail)
        raise BootstrapError(
            "PLATFORM_ADMIN_PASSWORD_FILE must name a file with the first password "
            "(or, with OIDC, set PLATFORM_ADMIN_EMAIL to the address they sign in with)."
        )
    try:
        password = Path(path).read_text().strip()
    except OSError as error:
        raise BootstrapError(f"PLATFORM_ADMIN_PASSWORD_FILE: {error.strerror}: {path}") from None
    try:
        validate_password(password, user)
    except ValidationError as error:
        raise BootstrapError(f"PLATFORM_ADMIN_PASSWORD_FILE: {' '.join(error.messages)}") from None
    user.set_password(password)
    user.save(update_fields=["password"])
