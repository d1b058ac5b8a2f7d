"""API-key pages: the list, mint (shown once), revoke. Thin callers of access.services, as the
API is."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from access.api.views import filter_keys
from access.forms import MintForm
from access.models import ApiKey
from access.permissions import may_revoke
from access.services import key_mint, key_revoke
from core.exceptions import DomainError


@login_required
def key_list(request):
    """The keys of the tenants you belong to, newest first, filtered like the API."""
    keys = list(
        filter_keys(ApiKey.objects.visible_to(request.user), request.GET).select_related(
            "tenant", "deployment", "created_by"
        )[:500]
    )
    rows = [{"key": k, "can_revoke": k.revoked_at is None and may_revoke(request.user, k)} for k in keys]
    context = {
        "rows": rows,
        "gateway_url": settings.GATEWAY_PUBLIC_URL,
        "can_mint": MintForm(user=request.user).fields["tenant"].queryset.exists(),
    }
    return render(request, "access/apikey_list.html", context)


@login_required
@never_cache
def key_new(request):
    """Mint a key; the answer to the POST shows it once (never stored, never redirected to)."""
    initial = {"tenant": request.GET.get("tenant"), "deployment": request.GET.get("deployment")}
    form = MintForm(request.POST or None, user=request.user, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            key, plaintext = key_mint(
                user=request.user,
                tenant=data["tenant"],
                name=data["name"],
                deployment_id=data["deployment"].pk if data["deployment"] else None,
                expires_in_days=data["expires_in_days"],
            )
        except DomainError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        else:
            return render(request, "access/apikey_created.html", {"key": key, "plaintext": plaintext})
    return render(request, "access/apikey_form.html", {"form": form})


@login_required
@require_POST
def key_revoke_view(request, pk: int):
    key = get_object_or_404(ApiKey.objects.visible_to(request.user), pk=pk)
    try:
        key_revoke(user=request.user, key_id=key.pk)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Key {key.name} ({key.prefix}…) revoked.")
    return redirect("keys")
