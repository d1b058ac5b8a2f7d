"""Who may do what with the catalog: one (standing, row state, action) table, read by the
services, the API, the pages (their buttons) and the tests.

Everyone signed in reads the active rows (the request form and the picker offer them); platform
admins read every row and create, edit, deactivate and import facts. Whether a user is a platform
admin is quotas' rule (quotas.models.is_platform_admin), above this app: callers pass the standing.
"""

from __future__ import annotations

from enum import StrEnum

from core.exceptions import ConflictError, Forbidden


class Standing(StrEnum):
    SIGNED_IN = "signed_in"
    PLATFORM_ADMIN = "platform_admin"


class CatalogAction(StrEnum):
    SEE = "see"
    CREATE = "create"
    EDIT = "edit"
    DEACTIVATE = "deactivate"
    IMPORT_FACTS = "import_facts"


NEW, ACTIVE, INACTIVE = "new", "active", "inactive"  # NEW: a row not created yet

PERMISSIONS: dict[tuple[Standing, CatalogAction], frozenset[str]] = {
    (Standing.SIGNED_IN, CatalogAction.SEE): frozenset({ACTIVE}),
    (Standing.PLATFORM_ADMIN, CatalogAction.SEE): frozenset({ACTIVE, INACTIVE}),
    (Standing.PLATFORM_ADMIN, CatalogAction.CREATE): frozenset({NEW}),
    (Standing.PLATFORM_ADMIN, CatalogAction.EDIT): frozenset({ACTIVE, INACTIVE}),
    (Standing.PLATFORM_ADMIN, CatalogAction.DEACTIVATE): frozenset({ACTIVE}),
    (Standing.PLATFORM_ADMIN, CatalogAction.IMPORT_FACTS): frozenset({ACTIVE, INACTIVE}),
}


def state_of(row) -> str:
    return NEW if row is None else ACTIVE if row.active else INACTIVE


def allowed(standing: Standing | None, action: CatalogAction, row=None) -> bool:
    return standing is not None and state_of(row) in PERMISSIONS.get((standing, action), frozenset())


def require(standing: Standing | None, action: CatalogAction, row=None) -> None:
    """Forbidden (403) unless the standing may take the action at all; ConflictError (409) when it
    may, but not in the row's state (deactivating an inactive row)."""
    if allowed(standing, action, row):
        return
    if (standing, action) in PERMISSIONS:
        raise ConflictError(f"This catalog model is {state_of(row)}: it cannot be {_DONE[action]}.", code="state")
    raise Forbidden("Only platform admins manage the model catalog.")


_DONE = {
    CatalogAction.SEE: "seen",
    CatalogAction.CREATE: "created again",
    CatalogAction.EDIT: "changed",
    CatalogAction.DEACTIVATE: "deactivated",
    CatalogAction.IMPORT_FACTS: "given facts",
}
