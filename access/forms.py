"""The mint form: tenant and optional deployment limited to what the user may mint for."""

from __future__ import annotations

from django import forms

from access.permissions import KeyAction, allowed
from access.services import DEFAULT_DAYS, MAX_DAYS, NAME_MESSAGE
from deployments.models import ModelDeployment
from deployments.states import DELETED_OR_DELETING, actor_of
from quotas.models import Tenant


class MintForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), to_field_name="slug")
    deployment = forms.ModelChoiceField(
        queryset=ModelDeployment.objects.none(),
        required=False,
        empty_label="Every deployment of the tenant",
        help_text="A key for one deployment works only there; a tenant key works on all of them.",
    )
    name = forms.RegexField(
        regex=r"^[\w .:@-]{1,100}$", max_length=100, error_messages={"invalid": NAME_MESSAGE}, strip=True
    )
    expires_in_days = forms.IntegerField(
        min_value=1, max_value=MAX_DAYS, initial=DEFAULT_DAYS, label="Expires in (days)"
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        tenants = [
            t.pk
            for t in Tenant.objects.visible_to(user).filter(archived_at__isnull=True)
            if allowed(actor_of(t, user), KeyAction.MINT)
        ]
        self.fields["tenant"].queryset = Tenant.objects.filter(pk__in=tenants).order_by("slug")
        self.fields["deployment"].queryset = (
            ModelDeployment.objects.filter(tenant_id__in=tenants)
            .exclude(state__in=DELETED_OR_DELETING)
            .select_related("tenant")
            .order_by("tenant__slug", "name")
        )
        self.fields["deployment"].label_from_instance = lambda d: f"{d.tenant.slug} / {d.name}"

    def clean(self):
        data = super().clean()
        dep, tenant = data.get("deployment"), data.get("tenant")
        if dep is not None and tenant is not None and dep.tenant_id != tenant.pk:
            self.add_error("deployment", "That deployment belongs to another tenant.")
        return data
