"""The sharing page's forms: publish a deployment, a consumer's limits."""

from __future__ import annotations

from django import forms

from deployments.models import ModelDeployment
from deployments.states import DELETED_OR_DELETING, FINAL
from quotas.actors import actor_of
from quotas.models import Tenant
from sharing.models import MAX_LIMIT
from sharing.permissions import PERMISSIONS, ShareAction


def _limit(label: str) -> forms.IntegerField:
    return forms.IntegerField(
        label=label, required=False, min_value=1, max_value=MAX_LIMIT, help_text="Empty: no limit."
    )


def publishable(user):
    """The deployments `user` may publish: their tenant's admins', not deleted or final."""
    tenants = [
        t for t in Tenant.objects.visible_to(user) if actor_of(t, user) in PERMISSIONS[ShareAction.PUBLISH].actors
    ]
    return (
        ModelDeployment.objects.filter(tenant__in=tenants)
        .exclude(state__in=FINAL | DELETED_OR_DELETING)
        .select_related("tenant")
        .order_by("tenant__slug", "name")
    )


class PublishForm(forms.Form):
    deployment = forms.ModelChoiceField(queryset=ModelDeployment.objects.none(), empty_label="Choose a deployment")
    to_all = forms.BooleanField(label="Every tenant", required=False)
    tenants = forms.ModelMultipleChoiceField(
        queryset=Tenant.objects.none(),
        to_field_name="slug",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Or these tenants",
    )
    auto_approve = forms.BooleanField(
        label="Approve subscriptions at once", required=False, help_text="Otherwise a tenant admin here decides."
    )
    tokens_per_minute = _limit("Tokens per minute, each consumer")
    requests_per_minute = _limit("Requests per minute, each consumer")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        deployments = publishable(user)
        self.fields["deployment"].queryset = deployments
        if len(deployments) == 1:  # nothing to choose: the one deployment, preselected, no empty choice
            self.fields["deployment"].empty_label = None
            self.fields["deployment"].initial = deployments[0].pk
        self.fields["deployment"].label_from_instance = lambda d: (
            f"{d.tenant.slug} / {d.name} ({d.served_model_name or d.name})"
        )
        self.fields["tenants"].queryset = Tenant.objects.filter(archived_at__isnull=True).order_by("slug")
        self.fields["tenants"].label_from_instance = lambda t: t.slug


class LimitsForm(forms.Form):
    tokens_per_minute = _limit("Tokens per minute")
    requests_per_minute = _limit("Requests per minute")
