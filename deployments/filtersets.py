"""One FilterSet for deployment lists, shared by the browser list and the API."""

import django_filters

from deployments.choices import Backend, State
from deployments.models import ModelDeployment


class DeploymentFilterSet(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=State.choices)
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    flavor = django_filters.CharFilter(field_name="flavor__name")
    backend = django_filters.ChoiceFilter(choices=Backend.choices)
    q = django_filters.CharFilter(method="search", label="Search")

    class Meta:
        model = ModelDeployment
        fields = ["state", "tenant", "flavor", "backend"]

    def search(self, queryset, name, value):
        from django.db.models import Q

        return queryset.filter(Q(name__icontains=value) | Q(model_source__icontains=value))
