"""Identity-provider groups → tenant roles: the mapping setting and its reading. No Django import,
so portal/settings.py can check the mapping at start-up and stop with a message naming it.

OIDC_GROUP_ROLES is a JSON object: each key a group exactly as the provider puts it in the groups
claim (names, paths such as "/ml/alpha", LDAP DNs, GUIDs: anything), each value "tenant-slug:role"
or a list of them. Roles: viewer, member, tenant_admin. A person in several groups that map to the
same tenant gets the highest of those roles.

    OIDC_GROUP_ROLES='{"ml-alpha": "alpha:member", "ml-alpha-leads": "alpha:tenant_admin",
                       "analytics": ["alpha:viewer", "beta:member"]}'
"""

from __future__ import annotations

import json
import re

ROLES = ("viewer", "member", "tenant_admin")  # low to high; quotas.choices.Role holds the same values
SLUG = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

GroupRoles = dict[str, tuple[tuple[str, str], ...]]


class MappingError(ValueError):
    """The mapping setting is malformed; the message says where."""


def _grant(group: str, value: object) -> tuple[str, str]:
    if not isinstance(value, str) or value.count(":") != 1:
        raise MappingError(f"group {group!r}: expected 'tenant-slug:role', got {value!r}")
    slug, role = value.split(":")
    if not SLUG.fullmatch(slug) or len(slug) > 40:
        raise MappingError(f"group {group!r}: {slug!r} is not a tenant slug")
    if role not in ROLES:
        raise MappingError(f"group {group!r}: role {role!r} is not one of {', '.join(ROLES)}")
    return slug, role


def grant_named(name: str) -> tuple[str, str] | None:
    """The grant a group named "tenant-slug:role" itself spells (SCIM groups, portal.scim), or
    None when the name is not of that form."""
    try:
        return _grant(name, name)
    except MappingError:
        return None


def parse_group_roles(text: str | None) -> GroupRoles:
    """The mapping from its JSON text (empty: no group grants anything)."""
    if not text or not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise MappingError(f"not JSON ({error.msg} at character {error.pos})") from None
    if not isinstance(raw, dict):
        raise MappingError("expected a JSON object of group → 'tenant-slug:role' (or a list of them)")
    mapping = {}
    for group, value in raw.items():
        grants = value if isinstance(value, list) else [value]
        if not grants:
            raise MappingError(f"group {group!r}: no grants")
        mapping[group] = tuple(_grant(group, grant) for grant in grants)
    return mapping


def groups_of(claims: dict, claim: str) -> list[str]:
    """The groups in the claim: a list of strings (a lone string counts as one group; other
    values, such as objects some providers send, are ignored)."""
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [group for group in value if isinstance(group, str)]
    return []


def roles_for(groups: list[str], mapping: GroupRoles) -> dict[str, str]:
    """Tenant slug → the highest role any of the groups grants there."""
    roles: dict[str, str] = {}
    for group in groups:
        for slug, role in mapping.get(group, ()):
            if slug not in roles or ROLES.index(role) > ROLES.index(roles[slug]):
                roles[slug] = role
    return roles
