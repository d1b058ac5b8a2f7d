"""The priority tier forms of the platform pages (portal/tier_views.py); quotas.tiers decides."""

from __future__ import annotations

from django import forms

from quotas.forms import _reason
from quotas.tier_models import TIER_NAME_MAX, TIER_VALUE_MAX, TIER_VALUE_MIN, PriorityTier, validate_tier_name
from quotas.tiers import FIELDS


class TierForm(forms.Form):
    """A new tier, or an existing one's changeable fields (its name shown, fixed)."""

    name = forms.CharField(
        max_length=TIER_NAME_MAX,
        validators=[validate_tier_name],
        help_text="Lowercase letters, digits and '-'; the Kueue WorkloadPriorityClass is llm-portal-<name>. "
        "Fixed once created.",
    )
    display_name = forms.CharField(max_length=100, label="Display name", help_text="What people read, e.g. Production.")
    value = forms.IntegerField(
        min_value=TIER_VALUE_MIN,
        max_value=TIER_VALUE_MAX,
        help_text="Kueue priority: a higher value is admitted first and may preempt a lower one in the same "
        "tenant queue.",
    )
    description = forms.CharField(
        max_length=300,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="When to choose it; copied to the WorkloadPriorityClass.",
    )
    reason = _reason()

    def __init__(self, *args, tier: PriorityTier | None = None, **kwargs):
        if tier is not None:
            kwargs.setdefault("initial", {f: getattr(tier, f) for f in FIELDS})
        super().__init__(*args, **kwargs)
        if tier is not None:
            # Disabled: the posted value is ignored, the tier's own is used (quotas.tiers refuses a new one).
            self.fields["name"].disabled = True
            self.fields["name"].help_text = "Fixed: it names the Kueue WorkloadPriorityClass and deployments use it."


class TierDeleteForm(forms.Form):
    reason = _reason()
