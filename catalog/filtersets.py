"""One FilterSet for the catalog list, shared by the platform page and the API: task, size (a
bucket of catalog.sizes, the request form's picker's own, or a range in billions of parameters)
and a search over name, display name and source."""

from __future__ import annotations

import django_filters

from catalog.choices import Task
from catalog.models import CatalogModel
from catalog.sizes import SIZE_CHOICES, of_size


class CatalogModelFilter(django_filters.FilterSet):
    task = django_filters.ChoiceFilter(choices=Task.choices, help_text="chat, completion, embedding or score.")
    size = django_filters.ChoiceFilter(
        choices=SIZE_CHOICES,
        method="_size",
        empty_label="Any size",
        label="Size",
        help_text=f"Billions of parameters: {', '.join(label for _, label in SIZE_CHOICES)}. A model of unknown size "
        "is in none.",
    )
    min_params_b = django_filters.NumberFilter(
        method="_min_params", min_value=0, max_value=100_000, label="At least (billions of parameters)"
    )
    max_params_b = django_filters.NumberFilter(
        method="_max_params", min_value=0, max_value=100_000, label="At most (billions of parameters)"
    )
    search = django_filters.CharFilter(method="_search", max_length=100, label="Search")
    active = django_filters.BooleanFilter(help_text="Platform admins: true or false (others see active rows only).")

    class Meta:
        model = CatalogModel
        fields = ["task", "active"]

    def _min_params(self, queryset, name, value):
        return queryset.filter(parameters__gte=int(value * 10**9))

    def _max_params(self, queryset, name, value):
        return queryset.filter(parameters__lte=int(value * 10**9))

    def _size(self, queryset, name, value):
        return of_size(queryset, value)

    def _search(self, queryset, name, value):
        return queryset.search(value)
