from __future__ import annotations

from dataclasses import replace

from django.apps import AppConfig

from runtime.modelfacts import ModelFacts


def catalog_row_facts(model_source: str):
    """The facts of the catalog row whose source is `model_source` (an active row first), or None
    when no row has it or the row knows nothing yet. A fact the row leaves empty is taken from the
    built-in facts of the same Hugging Face id, where there are some (a row typed in with only its
    parameter count still gets the published KV-cache shape)."""
    from catalog.models import CatalogModel
    from deployments.catalog import known_model

    row = CatalogModel.objects.filter(source=model_source).order_by("-active", "name").first()
    if row is None:
        return None
    given = {name: value for name, value in row.facts().as_dict().items() if value is not None}
    if not given:
        return None
    known = known_model(model_source)
    return replace(known, **given) if known is not None else ModelFacts(**given)


class DeploymentsConfig(AppConfig):
    name = "deployments"

    def ready(self) -> None:
        # The catalog sits below deployments in the layers, so its rows are offered to the sizing
        # estimate from here (deployments.catalog.register_lookup), ahead of the built-in facts.
        from deployments.catalog import register_lookup

        register_lookup(catalog_row_facts)
