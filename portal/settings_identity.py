"""Identity settings beside portal/settings.py (which imports them): the roles an identity
provider's groups grant, SCIM provisioning, and the first platform admin. Read from the
environment through portal.env like every setting; a bad value stops start-up naming it."""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_int, env_list, env_str
from portal.oidc_groups import MappingError, parse_group_roles

# Tenant roles from the provider's groups, applied at every sign-in (portal/oidc.py): the claim
# that lists the groups, the JSON mapping group → "tenant-slug:role" (portal/oidc_groups.py), and
# the groups whose members are platform admins (empty: the provider does not decide that).
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups")
OIDC_USERNAME_CLAIM = env_str("OIDC_USERNAME_CLAIM", "preferred_username")
try:
    OIDC_GROUP_ROLES = parse_group_roles(env_str("OIDC_GROUP_ROLES", ""))
except MappingError as _error:
    raise ImproperlyConfigured(f"OIDC_GROUP_ROLES: {_error}") from None
OIDC_PLATFORM_ADMIN_GROUPS = env_list("OIDC_PLATFORM_ADMIN_GROUPS", [])
# SCIM 2.0 provisioning (portal/scim.py, /scim/v2/): the identity provider's bearer token, read
# once at start from a Secret-mounted file (rotate: replace the file, restart). Unset: the
# endpoints answer 404. A short or unreadable token stops the start with the reason.
SCIM_BEARER_TOKEN_FILE = env_str("SCIM_BEARER_TOKEN_FILE")
SCIM_BEARER_TOKEN = None
if SCIM_BEARER_TOKEN_FILE:
    try:
        SCIM_BEARER_TOKEN = Path(SCIM_BEARER_TOKEN_FILE).read_text().strip()
    except OSError as _error:
        raise ImproperlyConfigured(f"SCIM_BEARER_TOKEN_FILE: {_error.strerror}: {SCIM_BEARER_TOKEN_FILE}") from None
    if len(SCIM_BEARER_TOKEN) < 32:
        raise ImproperlyConfigured("SCIM_BEARER_TOKEN_FILE: the token must be at least 32 characters")
# The first platform admin, applied after every `migrate` (portal.accounts); the password file is
# a mounted Secret. Invitation links (portal.accounts) expire after INVITE_TTL_HOURS.
PLATFORM_ADMIN_USERNAME = env_str("PLATFORM_ADMIN_USERNAME")
PLATFORM_ADMIN_EMAIL = env_str("PLATFORM_ADMIN_EMAIL")
PLATFORM_ADMIN_PASSWORD_FILE = env_str("PLATFORM_ADMIN_PASSWORD_FILE")
PASSWORD_RESET_TIMEOUT = 3600 * env_int("INVITE_TTL_HOURS", 72, minimum=1, maximum=24 * 30)
