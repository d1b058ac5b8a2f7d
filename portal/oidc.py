"""Sign-in through the company's OpenID provider (mozilla-django-oidc), with tenant roles from
the provider's groups.

At every sign-in the groups claim (OIDC_GROUPS_CLAIM, from the userinfo endpoint) is read through
OIDC_GROUP_ROLES (portal/oidc_groups.py): memberships the groups grant are created or updated,
provider-managed memberships whose group is gone are removed (quotas.members), and membership of
a group in OIDC_PLATFORM_ADMIN_GROUPS makes the person a platform admin (when that setting is
set). Each change is audited with the actor "identity-provider".
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import SuspiciousOperation, ValidationError
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from portal.oidc_groups import groups_of, roles_for
from quotas.members import memberships_sync_from_idp, platform_admin_sync_from_idp

log = logging.getLogger(__name__)


class PortalOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's code flow; accounts matched by verified e-mail, named after the
    provider's username claim, and given the tenant roles their groups map to."""

    def verify_claims(self, claims) -> bool:
        # An address the provider itself says is unverified must not open an account that has it.
        return bool(claims.get("email")) and claims.get("email_verified", True) is not False

    def create_user(self, claims):
        user = self.UserModel.objects.create_user(self._username(claims), email=claims["email"])
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
