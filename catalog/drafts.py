"""A deployment request that names a catalog model (`catalog_model`): the row fills the model's
source, pinned revision, task and token Secret, so what runs is what the platform team pinned."""

from __future__ import annotations

from catalog.models import CatalogModel


def with_catalog_model(data: dict, *, partial: bool) -> dict:
    """`data` with the catalog row's fields filled in; {field: message} problems raise ValueError
    with (field, message). A request that changes the source without naming a revision loads the
    default branch of the new source (a revision of another model means nothing)."""
    row: CatalogModel | None = data.pop("catalog_model", None)
    if row is None:
        if "model_source" in data and "model_revision" not in data:
            data["model_revision"] = ""
        return data
    for field, value in (("model_source", row.source), ("model_revision", row.revision), ("task", row.task)):
        if data.get(field) not in (None, "", value):
            raise ValueError(
                field, f"The catalog model {row.name} sets this to {value or 'the default branch'}: leave it out."
            )
    data["model_source"], data["model_revision"], data["task"] = row.source, row.revision, row.task
    if row.gated and row.token_secret and not data.get("hf_token_secret"):
        data["hf_token_secret"] = row.token_secret
    if not partial and data.get("parameter_count_b") is None and row.parameters:
        data["parameter_count_b"] = round(row.parameters / 1e9, 3)
    return data
