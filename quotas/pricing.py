"""The one price rule: GPU-hours × the flavor's price per GPU-hour, unknown (None, never 0) when the
flavor has no price.

The usage ledger (usage.ledger) charges reserved GPU-hours with it; the price per hour that the
request form's fit panel, the approvals page, a proposed change's cost and the revision API show
is the same rule for one hour of the GPUs a deployment reserves (max replicas × TP × PP).
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from quotas.models import GpuFlavor


def gpu_hours_cost(gpu_hours: Decimal | int, price_per_gpu_hour: Decimal | None) -> Decimal | None:
    """What `gpu_hours` cost at `price_per_gpu_hour`; None when there is no price."""
    if price_per_gpu_hour is None:
        return None
    return Decimal(gpu_hours) * price_per_gpu_hour


def price_per_hour(flavor: GpuFlavor | None, gpus: int) -> Decimal | None:
    """What holding `gpus` GPUs of `flavor` costs per hour; None without a flavor or its price."""
    return None if flavor is None else gpu_hours_cost(gpus, flavor.price_per_gpu_hour)
