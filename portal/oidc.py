"""Sign-in through the company's OpenID provider (mozilla-django-oidc), with tenant roles from
the provider's groups.

Which account a sign-in opens. The provider's `email` claim names the account, and only when the
provider vouches for it: `email_verified` must be the JSON boolean `true`. A missing claim, the
string "true" or "false", 1, or anything else counts as unverified, and such a sign-in is refused
(mozilla-django-oidc's failure redirect): an account is never opened, or created, from an
address nobody proved to hold. A verified address opens the existing account whose address is
the same under core.identity's one rule (the local part exactly, the domain's ASCII letters
ignoring case; the reasons are there), or creates one when there is none; two accounts with that
address, or an inactive one, open nothing.

At every sign-in the groups claim (OIDC_GROUPS_CLAIM, from the userinfo endpoint) is read through
OIDC_GROUP_ROLES (portal/oidc_groups.py): memberships the groups grant are created or updated,
provider-managed memberships whose group is gone are removed (quotas.members; the leaver's keys
and tokens go with them, portal.deprovision), and membership of a group in
OIDC_PLATFORM_ADMIN_GROUPS makes the person a platform admin (when that setting is set). Each
change is audited with the actor "identity-provider".
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import SuspiciousOperation, ValidationError
from django.core.validators import validate_email
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from core.identity import users_with_email
from portal.oidc_groups import groups_of, roles_for
from quotas.members import memberships_sync_from_idp, platform_admin_sync_from_idp

log = logging.getLogger(__name__)


def verified_email(claims: dict) -> str | None:
    """The address the claims name, when the provider says it verified it (the JSON boolean
    `true`, nothing else) and it is a well-formed address; otherwise None."""
    email, verified = claims.get("email"), claims.get("email_verified")
    if verified is not True or not isinstance(email, str) or len(email) > 254:
        return None
    try:
        validate_email(email)
    except ValidationError:
        return None
    return email


class PortalOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's code flow; accounts matched by verified e-mail, named after the
    provider's username claim, and given the tenant roles their groups map to."""

    def verify_claims(self, claims) -> bool:
        # An address the provider does not vouch for must not open, or create, an account.
        return verified_email(claims) is not None

    def filter_users_by_claims(self, claims):
        email = verified_email(claims)
        return users_with_email(self.UserModel.objects.all(), email) if email else []

    def create_user(self, claims):
        user = self.UserModel.objects.create_user(self._username(claims), email=verified_email(claims))
        return self._sync(user, claims)

    def update_user(self, user, claims):
        return self._sync(user, claims)

    def _username(self, claims) -> str:
        """The provider's username claim when it is a valid, free username; otherwise
        mozilla-django-oidc's default (derived from the e-mail address)."""
        wanted = claims.get(settings.OIDC_USERNAME_CLAIM)
        if isinstance(wanted, str) and len(wanted) <= 150:
            try:
                UnicodeUsernameValidator()(wanted)
            except ValidationError:
                pass
            else:
                if not self.UserModel.objects.filter(username=wanted).exists():
                    return wanted
        return self.get_username(claims)

    def _sync(self, user, claims):
        if not user.is_active:
            raise SuspiciousOperation("inactive account")
        groups = groups_of(claims, settings.OIDC_GROUPS_CLAIM)
        changed = memberships_sync_from_idp(user=user, roles=roles_for(groups, settings.OIDC_GROUP_ROLES))
        if settings.OIDC_PLATFORM_ADMIN_GROUPS:
            admin_groups = set(settings.OIDC_PLATFORM_ADMIN_GROUPS)
            platform_admin_sync_from_idp(user=user, is_admin=bool(admin_groups & set(groups)))
        if changed:
            log.info("memberships of %s from provider groups: %s", user.username, changed)
        return user
