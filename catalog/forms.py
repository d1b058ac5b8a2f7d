"""The catalog row as a browser form (the platform pages). The rules are the model's
(CatalogModel.clean) and the service's; this form only types the values."""

from __future__ import annotations

from django import forms

from catalog.models import CatalogModel
from catalog.services import EDITABLE


class CatalogModelForm(forms.ModelForm):
    reason = forms.CharField(max_length=2000, required=False, label="Reason", help_text="Why: kept in the audit log.")

    class Meta:
        model = CatalogModel
        fields = list(EDITABLE)
        widgets = {"notes": forms.Textarea(attrs={"rows": 3})}
        labels = {
            "follow_default_branch": "Follow the default branch",
            "kv_heads": "KV heads",
            "head_dim": "Head dimension",
            "max_context": "Max context (tokens)",
            "kv_elements_per_token": "KV elements per token",
            "weight_bytes": "Weight bytes",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["name"].disabled = True
            self.fields["name"].help_text = "Fixed: policies and requests name it."

    def _post_clean(self):
        """Leave the cross-field rules to the service (one place, one message per field)."""

    def values(self) -> dict:
        data = dict(self.cleaned_data)
        data.pop("reason", None)
        if self.instance.pk:
            data.pop("name", None)
        return data
