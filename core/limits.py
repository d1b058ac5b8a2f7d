"""Bounds on rows people create that nothing else bounds (API tokens, endpoint keys): one check,
one answer. The limits are settings (portal.settings, read with portal.env's strict helpers).

The caller counts under a lock on the owner's row (select_for_update in its transaction), so two
concurrent creations cannot both see room for one more.
"""

from __future__ import annotations

from django.conf import settings

from core.exceptions import DomainError

LIMIT_REACHED = "limit_reached"


class LimitReached(DomainError):
    """The owner already holds the most rows of this kind the platform allows (a 400)."""

    code = LIMIT_REACHED


def check_room(*, held: int, setting: str, what: str, field: str = "non_field_errors") -> None:
    """Refuse one more `what` when `held` already reaches `settings.<setting>`."""
    limit = getattr(settings, setting)
    if held >= limit:
        raise LimitReached(
            f"{held} {what} already: the most allowed is {limit}. Revoke or delete one that is no longer used first.",
            field=field,
        )
