"""Browser forms. Validation rules are the same function the API uses (check_draft)."""

from __future__ import annotations

from django import forms
from django.conf import settings

from deployments.choices import Backend, Dtype, Quantization
from deployments.limits import LIMITS
from deployments.validation import NAME_MAX, check_draft
from quotas.choices import Role
from quotas.models import GpuFlavor, Tenant


class DeploymentForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), help_text="The team that owns it.")
    name = forms.CharField(
        max_length=NAME_MAX, help_text="Lowercase letters, digits and '-'; becomes the RayService name."
    )
    model_source = forms.CharField(
        max_length=500, help_text="Hugging Face id (org/model), s3://bucket/path or pvc://claim/path."
    )
    served_model_name = forms.CharField(
        max_length=200, required=False, help_text="The name clients pass as `model` (defaults to the name)."
    )
    hf_token_secret = forms.CharField(
        max_length=253,
        required=False,
        label="HF token secret",
        help_text="Secret in your namespace with key HF_TOKEN, for gated models.",
    )
    backend = forms.ChoiceField(choices=(), help_text="Where it runs.")
    flavor = forms.ModelChoiceField(
        queryset=GpuFlavor.objects.filter(active=True), widget=forms.RadioSelect, empty_label=None, label="Hardware"
    )
    tensor_parallel_size = forms.IntegerField(
        **LIMITS["tensor_parallel_size"].bounds(),
        initial=1,
        label="Tensor parallel",
        help_text="GPUs one model copy is split across inside a node.",
    )
    pipeline_parallel_size = forms.IntegerField(
        **LIMITS["pipeline_parallel_size"].bounds(),
        initial=1,
        label="Pipeline parallel",
        help_text="Stages across nodes (for models too big for one node).",
    )
    min_replicas = forms.IntegerField(**LIMITS["min_replicas"].bounds(), initial=1)
    max_replicas = forms.IntegerField(
        **LIMITS["max_replicas"].bounds(), initial=1, help_text="GPUs reserved = max replicas × TP × PP."
    )
    target_ongoing_requests = forms.IntegerField(
        **LIMITS["target_ongoing_requests"].bounds(),
        initial=16,
        help_text="Autoscaling target: in-flight requests per replica.",
    )
    max_model_len = forms.IntegerField(
        **LIMITS["max_model_len"].bounds(),
        required=False,
        label="Max model length",
        help_text="Context length; empty = the model's own. Sizes the KV cache.",
    )
    gpu_memory_utilization = forms.FloatField(
        **LIMITS["gpu_memory_utilization"].bounds(),
        initial=0.9,
        label="GPU memory utilization",
        help_text="Share of GPU memory vLLM may use (0.5–0.98).",
    )
    enable_chunked_prefill = forms.BooleanField(
        required=False, initial=True, help_text="Interleave long prompts with decoding."
    )
    max_num_batched_tokens = forms.IntegerField(
        **LIMITS["max_num_batched_tokens"].bounds(),
        required=False,
        label="Max batched tokens",
        help_text="Tokens per scheduler step; empty = vLLM default.",
    )
    quantization = forms.ChoiceField(choices=Quantization.choices, required=False)
    dtype = forms.ChoiceField(choices=Dtype.choices, initial=Dtype.AUTO)
    parameter_count_b = forms.FloatField(
        **LIMITS["parameter_count_b"].bounds(),
        required=False,
        label="Parameters (billions)",
        help_text="Only for models not in the catalog, for the memory estimate.",
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["tenant"].queryset = Tenant.objects.filter(
            pk__in=[t.pk for t in Tenant.objects.visible_to(user) if t.has_role(user, Role.MEMBER)]
        )
        self.fields["backend"].choices = [(b, label) for b, label in Backend.choices if b in settings.RUNTIME_BACKENDS]
        self.fields["backend"].initial = settings.RUNTIME_DEFAULT_BACKEND
        self.check = None

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        self.check = check_draft(dict(data, quantization=data.get("quantization") or ""), tenant=data.get("tenant"))
        for field, message in self.check.errors.items():
            self.add_error(field if field in self.fields else None, message)
        return data


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
    # The generation the admin reviewed; an approval of anything else is refused (409 in the API).
    generation = forms.IntegerField(min_value=1, max_value=2_147_483_647, required=False, widget=forms.HiddenInput)


class ScaleForm(forms.Form):
    min_replicas = forms.IntegerField(**LIMITS["min_replicas"].bounds())
    max_replicas = forms.IntegerField(**LIMITS["max_replicas"].bounds())
