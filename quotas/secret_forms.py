"""The tenant page's credential forms: every secret field is a password input that never renders a
value back (not even the one just typed, when the form comes back with an error). The rules are
quotas.tenant_secrets' cleaners, so the page and the API refuse the same input with the same words."""

from __future__ import annotations

from django import forms

from quotas.secret_models import SecretKind
from quotas.tenant_secrets import CLEANERS
from quotas.validators import validate_storage_class
from runtime.manifests.storage import CACHE_SIZE_MAX_GI, CACHE_SIZE_MIN_GI


def _secret(label: str, help_text: str = "") -> forms.CharField:
    widget = forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password", "spellcheck": "false"})
    return forms.CharField(label=label, help_text=help_text, strip=False, required=False, widget=widget)


class _SecretForm(forms.Form):
    kind: SecretKind

    def clean(self):
        data = super().clean()
        values, errors = CLEANERS[self.kind](data)
        for field, messages in errors.items():
            for message in messages:
                self.add_error(field, message)
        return data


class HfTokenForm(_SecretForm):
    kind = SecretKind.HF_TOKEN
    prefix = "hf"
    token = _secret("Hugging Face token", "A read token (hf_…) for gated or private models; shown never again.")


class S3Form(_SecretForm):
    kind = SecretKind.S3
    prefix = "s3"
    access_key_id = _secret("Access key id")
    secret_access_key = _secret("Secret access key", "Shown never again.")
    endpoint = forms.CharField(
        label="Endpoint", required=False, max_length=2048, help_text="e.g. https://minio.example.com (empty: AWS S3)."
    )
    region = forms.CharField(label="Region", required=False, max_length=32, help_text="Empty: us-east-1.")


FORMS = {SecretKind.HF_TOKEN: HfTokenForm, SecretKind.S3: S3Form}


class StorageForm(forms.Form):
    """A platform admin's override of the tenant's model-cache claim (quotas.model_cache.storage_set)."""

    prefix = "storage"
    model_cache_size_gi = forms.IntegerField(
        label="Model-cache size (GiB)",
        required=False,
        min_value=CACHE_SIZE_MIN_GI,
        max_value=CACHE_SIZE_MAX_GI,
        help_text="Empty: MODEL_CACHE_SIZE_GI. Only ever grown, and only if the class allows expansion.",
    )
    model_cache_storage_class = forms.CharField(
        label="Storage class",
        required=False,
        max_length=253,
        validators=[validate_storage_class],
        help_text="Empty: MODEL_CACHE_STORAGE_CLASS. Fixed once the claim exists.",
    )
