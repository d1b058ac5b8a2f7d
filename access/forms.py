"""The mint form: tenant and optional deployment limited to what the user may mint for."""

from __future__ import annotations

from django import forms

from access.permissions import mint_tenants
from access.services import DEFAULT_DAYS, MAX_DAYS, NAME_MESSAGE, key_tenant
from core.exceptions import DomainError
from deployments.models import ModelDeployment
from deployments.states import DELETED_OR_DELETING
from quotas.models import Tenant


class MintForm(forms.Form):
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.none(),
        to_field_name="slug",
        required=False,
        empty_label="The chosen deployment's tenant",
    )
    deployment = forms.ModelChoiceField(
        queryset=ModelDeployment.objects.none(),
        required=False,
        empty_label="Every deployment of the tenant",
        help_text="A key for one deployment works only there (its tenant is taken from it); "
        "a tenant key works on all of them.",
    )
    name = forms.RegexField(
        regex=r"^[\w .:@-]{1,100}$", max_length=100, error_messages={"invalid": NAME_MESSAGE}, strip=True
    )
    expires_in_days = forms.IntegerField(
        min_value=1, max_value=MAX_DAYS, initial=DEFAULT_DAYS, label="Expires in (days)"
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        tenants = mint_tenants(user).order_by("slug")
        self.fields["tenant"].queryset = tenants
        if len(tenants) == 1:  # nothing to choose: the one tenant, preselected, no empty choice
            self.fields["tenant"].empty_label = None
            self.fields["tenant"].initial = tenants[0].slug
        self.fields["deployment"].queryset = (
            ModelDeployment.objects.filter(tenant__in=tenants)
            .exclude(state__in=DELETED_OR_DELETING)
            .select_related("tenant")
            .order_by("tenant__slug", "name")
        )
        self.fields["deployment"].label_from_instance = lambda d: f"{d.tenant.slug} / {d.name}"

    def clean(self):
        data = super().clean()
        if "tenant" in data and "deployment" in data:  # both parsed: access.services.key_tenant decides
            try:
                data["tenant"] = key_tenant(tenant=data["tenant"], deployment=data["deployment"])
            except DomainError as error:
                self.add_error(error.field, error.message)
        return data
