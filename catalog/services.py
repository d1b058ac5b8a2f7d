"""Writes to the catalog: create, change, deactivate, import facts. Each checks the permission
table (catalog.permissions), validates the row (CatalogModel.clean) and is audited with the
values before and after. Callers (the platform pages, the API, the Django admin) pass the
actor's standing: whether a user is a platform admin is quotas' rule, above this app."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.forms.models import model_to_dict
from django.utils import timezone

from catalog.models import FACT_FIELDS, CatalogModel
from catalog.permissions import CatalogAction, Standing, require
from catalog.sources import source_error, source_kind
from core.exceptions import ConflictError, DomainError
from core.models import audit
from runtime.backends.local.paths import confined_model_path
from runtime.modelfacts import ModelFacts, ModelFactsError, read_model_dir
from runtime.modelfacts_s3 import S3Endpoint, read_model_s3

# What a person sets on a row (facts included: typed in, or imported and then corrected).
EDITABLE = (
    "name",
    "display_name",
    "source",
    "revision",
    "follow_default_branch",
    "task",
    "licence",
    "gated",
    "token_source",
    "token_secret",
    *FACT_FIELDS,
    "notes",
    "active",
)
_NULLABLE_TEXT = ("architecture", "model_type", "dtype")  # ModelFacts says None, the columns ""


def _values(row: CatalogModel) -> dict:
    return {k: v for k, v in model_to_dict(row, fields=EDITABLE).items()}


def _validated_save(row: CatalogModel) -> None:
    """full_clean (field rules and CatalogModel.clean) as one DomainError on the first field."""
    try:
        row.full_clean()
    except ValidationError as error:
        field, messages = next(iter(error.message_dict.items()))
        codes = {e.code for e in error.error_dict.get("name", [])}
        if field == "name" and "unique" in codes:
            raise ConflictError(f"A catalog model named {row.name!r} already exists.", field="name") from None
        raise DomainError(messages[0], field=None if field == "__all__" else field) from None
    try:
        with transaction.atomic():
            row.save()
    except IntegrityError:
        raise ConflictError(f"A catalog model named {row.name!r} already exists.", field="name") from None


def _clean_values(values: dict) -> dict:
    unknown = sorted(set(values) - set(EDITABLE))
    if unknown:
        raise DomainError(f"Not a catalog field: {', '.join(unknown)}.", field=unknown[0])
    return {k: ("" if k in _NULLABLE_TEXT and v is None else v) for k, v in values.items()}


@transaction.atomic
def catalog_model_create(*, actor, standing: Standing | None, values: dict, reason: str = "") -> CatalogModel:
    """A new catalog row (platform admins)."""
    require(standing, CatalogAction.CREATE)
    row = CatalogModel(**_clean_values(values), created_by=actor, updated_by=actor)
    _validated_save(row)
    audit(actor=actor, action="catalog.create", obj=row, reason=reason, changes={"to": _values(row)})
    return row


@transaction.atomic
def catalog_model_update(
    *, row_id: int, actor, standing: Standing | None, values: dict, reason: str = ""
) -> CatalogModel:
    """Change a row; a value left out keeps its own. The name is fixed (policies and requests name it)."""
    row = CatalogModel.objects.select_for_update().get(pk=row_id)
    action = CatalogAction.DEACTIVATE if values.get("active") is False and row.active else CatalogAction.EDIT
    require(standing, action, row)
    values = _clean_values(values)
    if values.get("name", row.name) != row.name:
        raise DomainError(
            f"The name {row.name!r} is fixed: policies and requests name it. Create a new row instead.",
            field="name",
            code="immutable",
        )
    before = _values(row)
    for key, value in values.items():
        setattr(row, key, value)
    changed = {k: v for k, v in _values(row).items() if before[k] != v}
    if not changed:
        return row
    row.updated_by = actor
    _validated_save(row)
    verb = "catalog.deactivate" if action == CatalogAction.DEACTIVATE else "catalog.update"
    audit(
        actor=actor,
        action=verb,
        obj=row,
        reason=reason,
        changes={"from": {k: before[k] for k in changed}, "to": changed},
    )
    return row


@transaction.atomic
def catalog_model_deactivate(*, row_id: int, actor, standing: Standing | None, reason: str = "") -> CatalogModel:
    """No longer offered for new requests; deployments already running keep running. An inactive
    row is a conflict (the table allows deactivating active rows only)."""
    require(standing, CatalogAction.DEACTIVATE, CatalogModel.objects.select_for_update().get(pk=row_id))
    return catalog_model_update(row_id=row_id, actor=actor, standing=standing, values={"active": False}, reason=reason)


def _facts_reader(row: CatalogModel, path: str) -> tuple[str, Callable[[], ModelFacts]]:
    """Where the facts come from and the read that gets them: `path` if given, else the row's own
    source. A directory must lie under LOCAL_MODEL_ROOT; an s3:// prefix is read when the portal
    has an S3 endpoint (MODEL_IMPORT_S3_ENDPOINT_URL). Volume claims and the hub are never read."""
    where = path or row.source
    if where.startswith("s3://"):
        if problem := source_error(where, local_paths=False):
            raise DomainError(problem, field="path")
        if not settings.MODEL_IMPORT_S3_ENDPOINT_URL:
            raise DomainError(
                f"{where} is not reachable from the portal: no S3 endpoint is configured "
                f"(MODEL_IMPORT_S3_ENDPOINT_URL). Import from a local copy under {settings.LOCAL_MODEL_ROOT} "
                "(path), or type the facts in.",
                field="path",
                code="unreachable",
            )
        return where, partial(read_model_s3, where, _s3_endpoint())
    if not path and row.kind == "pvc":
        raise DomainError(
            f"{row.source} is not reachable from the portal: it reads no volume claims. "
            f"Import from a local copy under {settings.LOCAL_MODEL_ROOT} (path), or type the facts in.",
            field="path",
            code="unreachable",
        )
    if not path and row.kind == "hf":
        raise DomainError(
            "The portal never contacts the Hugging Face hub. Import from a local copy of the model "
            f"under {settings.LOCAL_MODEL_ROOT} (path), or type the facts in.",
            field="path",
            code="unreachable",
        )
    if not where.startswith("/") or source_kind(where) != "local":
        raise DomainError(f"A directory under {settings.LOCAL_MODEL_ROOT}, or an s3://bucket/path.", field="path")
    try:
        real = Path(confined_model_path(where, settings.LOCAL_MODEL_ROOT))
    except ValueError as error:
        raise DomainError(str(error), field="path") from None
    if not os.path.isdir(real):
        raise DomainError(f"{where} is not a directory.", field="path")
    return str(real), partial(read_model_dir, real)


def _s3_endpoint() -> S3Endpoint:
    return S3Endpoint(
        url=settings.MODEL_IMPORT_S3_ENDPOINT_URL,
        region=settings.MODEL_IMPORT_S3_REGION,
        access_key_id=settings.MODEL_IMPORT_S3_ACCESS_KEY_ID,
        secret_access_key=settings.MODEL_IMPORT_S3_SECRET_ACCESS_KEY,
        session_token=settings.MODEL_IMPORT_S3_SESSION_TOKEN,
        timeout_seconds=settings.MODEL_IMPORT_S3_TIMEOUT_SECONDS,
        deadline_seconds=settings.MODEL_IMPORT_S3_DEADLINE_SECONDS,
    )


def catalog_model_import_facts(
    *, row_id: int, actor, standing: Standing | None, path: str = "", reason: str = ""
) -> CatalogModel:
    """Read the architecture facts from a model's files (runtime.modelfacts: config.json and the
    like; nothing in them is executed) and store them; audited with the facts before and after.
    The read holds no transaction (a bucket may take seconds); the row is locked only to store."""
    row = CatalogModel.objects.get(pk=row_id)
    require(standing, CatalogAction.IMPORT_FACTS, row)
    origin, read = _facts_reader(row, path)
    try:
        facts = read()
    except ModelFactsError as error:
        raise DomainError(f"Cannot read the model's files: {error}", field="path") from None
    return _facts_store(
        row_id=row_id, source=row.source, facts=facts, origin=origin, actor=actor, standing=standing, reason=reason
    )


@transaction.atomic
def _facts_store(
    *, row_id: int, source: str, facts: ModelFacts, origin: str, actor, standing: Standing | None, reason: str
) -> CatalogModel:
    row = CatalogModel.objects.select_for_update().get(pk=row_id)
    require(standing, CatalogAction.IMPORT_FACTS, row)
    if row.source != source:
        raise ConflictError(
            f"The source of {row.name} changed while its facts were read; import them again.", field="path"
        )
    before = {k: getattr(row, k) for k in FACT_FIELDS}
    for key, value in facts.as_dict().items():
        setattr(row, key, "" if key in _NULLABLE_TEXT and value is None else value)
    row.facts_imported_at = timezone.now()
    row.updated_by = actor
    _validated_save(row)
    after = {k: getattr(row, k) for k in FACT_FIELDS}
    audit(
        actor=actor,
        action="catalog.import_facts",
        obj=row,
        reason=reason or f"Imported from {origin}",
        changes={"from": before, "to": after},
    )
    return row
