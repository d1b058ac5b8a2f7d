"""The one table of a deployment spec's numeric limits.

The model's validators, the API serializers, the browser form, the scale service and the
templates' `min`/`max` attributes all read it, so a limit changes in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.validators import MaxValueValidator, MinValueValidator


@dataclass(frozen=True)
class Limit:
    low: int | float
    high: int | float

    def validators(self) -> list:
        """For model fields."""
        return [MinValueValidator(self.low), MaxValueValidator(self.high)]

    def bounds(self) -> dict:
        """For DRF and Django form fields: `min_value` / `max_value`."""
        return {"min_value": self.low, "max_value": self.high}

    def __contains__(self, value) -> bool:
        return self.low <= value <= self.high


LIMITS: dict[str, Limit] = {
    "tensor_parallel_size": Limit(1, 64),
    "pipeline_parallel_size": Limit(1, 64),
    "min_replicas": Limit(0, 100),
    "max_replicas": Limit(1, 100),
    "target_ongoing_requests": Limit(1, 10_000),
    "max_model_len": Limit(16, 10_000_000),
    "gpu_memory_utilization": Limit(0.5, 0.98),
    "max_num_batched_tokens": Limit(16, 10_000_000),
    "parameter_count_b": Limit(0.001, 100_000),
}
