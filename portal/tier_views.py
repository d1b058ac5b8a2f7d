"""Priority tier pages: the list (everyone signed in reads it: a request names a tier its tenant
allows), and create (on the list), edit and delete for platform admins. Thin callers of quotas.tiers, the same
services as the API (quotas.api.views.PriorityTierViewSet); a refusal becomes a form error."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render

from core.exceptions import DomainError
from quotas import tiers
from quotas.models import PriorityTier, Tenant, is_platform_admin
from quotas.tier_forms import TierDeleteForm, TierForm


def _require_platform_admin(request) -> None:
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins manage priority tiers.")


def _refused(form, error: DomainError) -> None:
    form.add_error(error.field if error.field in form.fields else None, error.message)


@login_required
def tier_list(request):
    """Every tier with its Kueue class and the deployments (in the tenants one sees) that use it;
    platform admins create one with the form below the list."""
    if request.method == "POST":
        _require_platform_admin(request)
    form = TierForm(request.POST or None) if is_platform_admin(request.user) else None
    if form is not None and form.is_bound and form.is_valid():
        try:
            row = tiers.tier_create(actor=request.user, **form.cleaned_data)
        except DomainError as error:
            _refused(form, error)
        else:
            messages.success(request, f"Priority tier {row.name} created; Kueue follows.")
            return redirect("platform-tiers")
    usage = tiers.tier_usage(tenants=Tenant.objects.visible_to(request.user))
    rows = [(tier, usage.get(tier.name, 0)) for tier in PriorityTier.objects.all()]
    return render(request, "platform/tier_list.html", {"rows": rows, "form": form})


@login_required
def tier_edit(request, tier: str):
    """Change a tier's display name, value and description (its name is fixed)."""
    _require_platform_admin(request)
    row = get_object_or_404(PriorityTier, name=tier)
    form = TierForm(request.POST or None, tier=row)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        reason = data.pop("reason")
        try:
            row = tiers.tier_update(actor=request.user, name=row.name, values=data, reason=reason)
        except DomainError as error:
            _refused(form, error)
        else:
            messages.success(request, f"Priority tier {row.name} saved; Kueue follows.")
            return redirect("platform-tiers")
    return render(request, "platform/tier_form.html", {"form": form, "tier": row})


@login_required
def tier_delete(request, tier: str):
    """Ask first (what uses the tier, which tenants allow it), then delete it."""
    _require_platform_admin(request)
    row = get_object_or_404(PriorityTier, name=tier)
    form = TierDeleteForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            tiers.tier_delete(actor=request.user, name=row.name, **form.cleaned_data)
        except DomainError as error:
            _refused(form, error)
        else:
            messages.success(request, f"Priority tier {row.name} deleted; its Kueue class follows.")
            return redirect("platform-tiers")
    context = {
        "form": form,
        "tier": row,
        "in_use": tiers.tier_usage().get(row.name, 0),
        "tenants": Tenant.objects.filter(allowed_tiers=row).order_by("slug"),
    }
    return render(request, "platform/tier_delete.html", context)
