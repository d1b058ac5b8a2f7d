"""API-key pages: the list, mint (shown once), revoke (after a confirmation page). Thin callers
of access.services, as the API is."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache

from access.api.views import filter_keys
from access.forms import MintForm
from access.models import ApiKey
from access.permissions import KeyAction, allowed, may_revoke, mint_note, mint_tenants, revoke_note
from access.services import key_mint, key_revoke
from access.tenant_endpoint import endpoints
from core.exceptions import DomainError
from deployments.states import actor_of
from quotas.models import Tenant


@login_required
def key_list(request):
    """The keys of the tenants you belong to, newest first, filtered like the API."""
    keys = list(
        filter_keys(ApiKey.objects.visible_to(request.user), request.GET)
        .select_related("tenant", "deployment", "created_by")
        .with_month_usage()[:500]
    )
    rows = [{"key": k, "can_revoke": k.revoked_at is None and may_revoke(request.user, k)} for k in keys]
    context = {
        "rows": rows,
        "endpoints": [
            e for e in endpoints(Tenant.objects.visible_to(request.user).order_by("slug")) if e["gateway"] or e["local"]
        ],
        "gateway_url": settings.GATEWAY_PUBLIC_URL,
        "can_mint": mint_tenants(request.user).exists(),
        "mint_note": mint_note(),
        # Said only where an active key of the list shows no Revoke button.
        "revoke_note": revoke_note() if any(r["key"].revoked_at is None and not r["can_revoke"] for r in rows) else "",
    }
    return render(request, "access/apikey_list.html", context)


def endpoint_panel(request, dep) -> dict:
    """What the deployment page's Endpoint panel shows about keys (registered with
    deployments.panels by AccessConfig.ready): the mint link only where the user may mint."""
    can_mint = allowed(actor_of(dep.tenant, request.user), KeyAction.MINT) and not dep.tenant.archived
    return {"can_mint_key": can_mint, "key_mint_note": "" if can_mint else mint_note()}


@login_required
@never_cache
def key_new(request):
    """Mint a key; the answer to the POST shows it once (never stored, never redirected to).
    Someone who may mint in no tenant is told why instead of shown a form with empty lists."""
    if not mint_tenants(request.user).exists():
        return render(request, "access/apikey_form.html", {"refusal": mint_note()}, status=403)
    initial = {name: request.GET[name] for name in ("tenant", "deployment") if request.GET.get(name)}
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
def key_revoke_view(request, pk: int):
    """Revoke a key after a confirmation page (GET, or a POST without `confirm`): it works without
    JavaScript. The API's revoke stays one call."""
    key = get_object_or_404(ApiKey.objects.visible_to(request.user).select_related("tenant", "deployment"), pk=pk)
    if not may_revoke(request.user, key):  # the service refuses too; the page says who may
        return render(request, "access/apikey_revoke.html", {"key": key, "refusal": revoke_note()}, status=403)
    if request.method != "POST" or request.POST.get("confirm") != "1":
        return render(request, "access/apikey_revoke.html", {"key": key})
    try:
        key_revoke(user=request.user, key_id=key.pk)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Key {key.name} ({key.prefix}…) revoked.")
    return redirect("keys")
