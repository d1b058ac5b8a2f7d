"""Model sizes by parameter count: the buckets the request form's picker and the catalog API (and
the platform catalog page, through the same FilterSet) filter by. One definition, read by both.

The bounds sit between the sizes models are published at, so a model lands where its name puts
it although its exact count runs over the round number: Llama 3.2 3B has 3.21e9 parameters and
Gemma 3 4B 4.3e9 (small), Qwen2.5 14B 14.7e9 (medium), Llama 3.1 70B 70.6e9 and Qwen2.5 72B 72.7e9
(large), Mistral Large 123B and Llama 3.1 405B (very large). A mixture of experts counts all its
experts (Mixtral 8x7B: 46.7e9, large), as its weights need that memory. A row whose parameter
count is unknown is in no bucket: it is listed only when no size is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q


@dataclass(frozen=True)
class SizeBucket:
    """Models with more than `above_b` (exclusive) and at most `up_to_b` (inclusive) billion
    parameters; None is unbounded."""

    value: str
    label: str
    above_b: int | None
    up_to_b: int | None

    def q(self) -> Q:
        """The rows in this bucket (a row of unknown size never is)."""
        q = Q(parameters__isnull=False)
        if self.above_b is not None:
            q &= Q(parameters__gt=self.above_b * 10**9)
        if self.up_to_b is not None:
            q &= Q(parameters__lte=self.up_to_b * 10**9)
        return q


BUCKETS = (
    SizeBucket("up-to-5b", "Up to 5B", None, 5),
    SizeBucket("5-20b", "5–20B", 5, 20),
    SizeBucket("20-100b", "20–100B", 20, 100),
    SizeBucket("over-100b", "Over 100B", 100, None),
)
SIZE_CHOICES = [(bucket.value, bucket.label) for bucket in BUCKETS]
_BY_VALUE = {bucket.value: bucket for bucket in BUCKETS}


def size_bucket(value: str | None) -> SizeBucket | None:
    """The bucket named `value`; None for "" or anything else (a query string is untrusted)."""
    return _BY_VALUE.get(value or "")


def of_size(queryset, value: str):
    """`queryset` (catalog rows) in the bucket named `value`; unfiltered for no or an unknown bucket."""
    bucket = size_bucket(value)
    return queryset if bucket is None else queryset.filter(bucket.q())
