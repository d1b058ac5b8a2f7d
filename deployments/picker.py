"""The request form's model picker: the catalog models a tenant's policy allows, each with how it
fits on each of the tenant's flavors.

Nothing here decides anything of its own: which models are allowed is quotas.policy's
`model_errors`, the memory and KV capacity is deployments.sizing's `estimate`, the tensor-parallel
placement is runtime.manifests.common's `placement_error` and the price is quotas.pricing's
`price_per_hour`, the same functions the fit panel and the API's preview answer with; the size
buckets are catalog.sizes', the catalog API's.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from catalog.choices import Task
from catalog.models import CatalogModel
from catalog.sizes import of_size, size_bucket
from deployments import sizing
from quotas.models import GpuFlavor, Tenant
from quotas.policy import model_errors
from quotas.pricing import price_per_hour
from runtime.manifests.common import placement_error

# The estimate's verdicts a card counts as fitting ("thin" fits, with the fit panel's warning).
FITTING = ("fits", "thin")


@dataclass(frozen=True)
class FlavorFit:
    """One catalog model on one flavor at the smallest tensor parallelism that fits (one replica,
    no pipeline stages, the form's default engine options). `tp` is None when nothing up to the
    node's GPUs fits, or when the model's size is unknown (`verdict` "unknown")."""

    flavor: GpuFlavor
    verdict: str
    tp: int | None = None
    kv_tokens: int | None = None
    price_per_hour: Decimal | None = None

    @property
    def gpus(self) -> int | None:
        return self.tp


@dataclass(frozen=True)
class Card:
    """A catalog model as the picker shows it."""

    row: CatalogModel
    fits: tuple[FlavorFit, ...]
    needs_token: bool  # gated, and neither the row nor the tenant has a token for it

    @property
    def fitting(self) -> tuple[FlavorFit, ...]:
        return tuple(fit for fit in self.fits if fit.tp is not None)


def tp_options(gpus_per_node: int) -> list[int]:
    """The tensor-parallel sizes one node can hold, smallest first (placement_error's rule)."""
    return [
        tp
        for tp in range(1, gpus_per_node + 1)
        if placement_error(
            tensor_parallel_size=tp,
            pipeline_parallel_size=1,
            gpus_per_node=gpus_per_node,
            flavor="",
            whole_node_pods=False,
        )
        is None
    ]


def flavor_fit(row: CatalogModel, flavor: GpuFlavor, *, gpu_memory_utilization: float) -> FlavorFit:
    """`row` on `flavor`: the smallest TP ≤ the node's GPUs whose estimate fits."""
    verdict = "does_not_fit"
    for tp in tp_options(flavor.gpus_per_node):
        fit = sizing.estimate(
            model_source=row.source,
            parameter_count_b=None,  # the row's own facts (deployments.catalog's lookup of catalog rows)
            dtype="auto",
            quantization="",
            kv_cache_dtype="auto",
            tensor_parallel_size=tp,
            pipeline_parallel_size=1,
            max_model_len=None,
            gpu_memory_gib=flavor.gpu_memory_gib,
            gpu_memory_utilization=gpu_memory_utilization,
        )
        if fit.verdict == "unknown":
            return FlavorFit(flavor, "unknown")
        if fit.verdict in FITTING:
            return FlavorFit(flavor, fit.verdict, tp, fit.kv_tokens, price_per_hour(flavor, tp))
    return FlavorFit(flavor, verdict)


def filters(query) -> dict[str, str]:
    """The picker's filters from a query string (untrusted): the search text, the task and the size
    bucket, each "" where absent or not one of the choices."""
    task, size = query.get("task", ""), query.get("size", "")
    return {
        "text": query.get("q", "")[:100],
        "task": task if task in Task.values else "",
        "size": size if size_bucket(size) else "",
    }


def allowed_rows(tenant: Tenant | None, *, text: str = "", task: str = "", size: str = "", name: str = ""):
    """The active catalog rows `tenant`'s policy allows at their pinned revision (every active row
    without a tenant), matching the search `text`, `task`, the size bucket `size` (catalog.sizes:
    a row of unknown size matches no bucket) and, given one, the row's `name`."""
    rows = of_size(CatalogModel.objects.filter(active=True).search(text), size)
    if task:
        rows = rows.filter(task=task)
    if name:
        rows = rows.filter(name=name)
    if tenant is None:
        return list(rows)
    return [row for row in rows if "model_source" not in model_errors(tenant, row.source, row.revision)]


def cards(
    tenant: Tenant | None,
    flavors,
    *,
    text: str = "",
    task: str = "",
    size: str = "",
    gpu_memory_utilization: float = 0.9,
) -> list[Card]:
    """The picker's cards: each allowed row with its fit on each of `flavors`."""
    flavors = list(flavors)
    found = []
    for row in allowed_rows(tenant, text=text, task=task, size=size):
        needs_token = False
        if row.gated and not row.token_secret and tenant is not None:
            needs_token = "hf_token_secret" in model_errors(tenant, row.source, row.revision)
        fits = tuple(flavor_fit(row, f, gpu_memory_utilization=gpu_memory_utilization) for f in flavors)
        found.append(Card(row, fits, needs_token))
    return found
