"""One FilterSet for deployment lists, shared by the browser list and the API."""

import django_filters

from deployments.choices import State, backend_choices
from deployments.models import ModelDeployment


class DeploymentFilterSet(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=State.choices)
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    flavor = django_filters.CharFilter(field_name="flavor__name")
    backend = django_filters.ChoiceFilter(choices=[])  # the registry's, per filter set (__init__)
    q = django_filters.CharFilter(method="search", label="Search")

    class Meta:
        model = ModelDeployment
        fields = ["state", "tenant", "flavor", "backend"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        backend = self.filters["backend"]
        backend.extra["choices"] = backend_choices()
        backend.__dict__.pop("_field", None)  # a form field built before (the API schema builds one) kept the old list

    def search(self, queryset, name, value):
        from django.db.models import Q

        return queryset.filter(Q(name__icontains=value) | Q(model_source__icontains=value))
