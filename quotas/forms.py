from __future__ import annotations

from django import forms

from quotas.models import GpuFlavor


class QuotaRequestForm(forms.Form):
    flavor = forms.ModelChoiceField(queryset=GpuFlavor.objects.filter(active=True))
    nominal_gpus = forms.IntegerField(
        min_value=0, max_value=100_000, label="Nominal GPUs", help_text="Guaranteed GPUs for this flavor."
    )
    borrowing_limit_gpus = forms.IntegerField(
        min_value=0,
        max_value=100_000,
        initial=0,
        label="Borrowing limit",
        help_text="Extra GPUs you may borrow from the cohort when idle (can be reclaimed by preemption).",
    )
    lending_limit_gpus = forms.IntegerField(
        min_value=0,
        max_value=100_000,
        required=False,
        label="Lending limit",
        help_text="Most of your unused quota others may borrow (empty: all).",
    )
    justification = forms.CharField(
        max_length=2000, widget=forms.Textarea(attrs={"rows": 3}), help_text="What will run on it, and why now."
    )


class DecisionForm(forms.Form):
    comment = forms.CharField(
        max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}), label="Comment (required to reject)"
    )
