"""The tenant page's storage and credentials section: set (or replace) and delete the tenant's
Hugging Face token and S3 credentials (quotas.tenant_secrets), and the model-cache claim's state."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from core.exceptions import DomainError, Forbidden
from quotas import tenant_secrets
from quotas.actors import actor_of
from quotas.model_cache import storage_set, wanted
from quotas.models import Tenant, is_platform_admin
from quotas.secret_forms import FORMS, StorageForm
from quotas.secret_models import SecretKind
from quotas.tenant_secrets import SecretAction


def secrets_context(request, tenant: Tenant, bound: dict, storage_form=None) -> dict:
    """The section's rows: each credential's state and, for those who may set it, its form."""
    actor = actor_of(tenant, request.user)
    can_set = tenant_secrets.allowed(actor, tenant, SecretAction.SET)
    can_delete = tenant_secrets.allowed(actor, tenant, SecretAction.DELETE)
    rows = []
    for status in tenant_secrets.secrets_status(tenant):
        kind = SecretKind(status["kind"])
        form = bound.get(kind) or (FORMS[kind]() if can_set else None)
        rows.append({**status, "form": form, "can_delete": can_delete and status["set"]})
    size_gi, storage_class = wanted(tenant)
    if storage_form is None and is_platform_admin(request.user):
        initial = {f: getattr(tenant, f) for f in ("model_cache_size_gi", "model_cache_storage_class")}
        storage_form = StorageForm(initial=initial)
    return {
        "storage_form": storage_form,
        "secret_rows": rows,
        "model_cache": {
            "claim": settings.MODEL_CACHE_PVC,
            "size_gi": size_gi,
            "storage_class": storage_class or "the cluster's default",
            "status": tenant.model_cache_status or {},
        },
    }


def _tenant(request, slug: str) -> Tenant:
    return get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)


def _authorize(request, tenant: Tenant, action: SecretAction) -> None:
    try:
        tenant_secrets.authorize(request.user, tenant, action)
    except Forbidden as error:
        raise PermissionDenied(error.message) from None


def _kind(kind: str) -> SecretKind:
    if kind not in SecretKind.values:
        raise Http404("unknown credential")
    return SecretKind(kind)


@login_required
@require_POST
def secret_set_view(request, slug: str, kind: str):
    from quotas.views import tenant_page, tenant_quota_form

    tenant, kind = _tenant(request, slug), _kind(kind)
    _authorize(request, tenant, SecretAction.SET)  # 403 (409: archived) before reading the form
    form = FORMS[kind](request.POST)
    if form.is_valid():
        try:
            tenant_secrets.secret_set(tenant=tenant, user=request.user, kind=kind, data=form.cleaned_data)
        except ValidationError as error:
            for field, problems in error.message_dict.items():
                form.add_error(field if field in form.fields else None, problems)
        except DomainError as error:
            form.add_error(None, error.message)
        else:
            name = tenant_secrets.SECRET_NAMES[kind]
            messages.success(request, f"{kind.label} saved as Secret {name}; it will not be shown again.")
            return redirect(f"{_page(slug)}#credentials")
    return tenant_page(request, tenant, tenant_quota_form(request, tenant), secret_forms={kind: form}, status=400)


@login_required
@require_POST
def secret_delete_view(request, slug: str, kind: str):
    tenant, kind = _tenant(request, slug), _kind(kind)
    _authorize(request, tenant, SecretAction.DELETE)
    try:
        deleted = tenant_secrets.secret_delete(tenant=tenant, user=request.user, kind=kind)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"{kind.label} deleted." if deleted else f"No {kind.label.lower()} was set.")
    return redirect(f"{_page(slug)}#credentials")


@login_required
@require_POST
def storage_set_view(request, slug: str):
    from quotas.views import tenant_page, tenant_quota_form

    tenant = _tenant(request, slug)
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins set a tenant's model-cache size and storage class.")
    form = StorageForm(request.POST)
    if form.is_valid():
        try:
            storage_set(tenant_id=tenant.pk, actor=request.user, **form.cleaned_data)
        except ValidationError as error:
            for field, problems in error.message_dict.items():
                form.add_error(field if field in form.fields else None, problems)
        except DomainError as error:
            form.add_error(None, error.message)
        else:
            messages.success(request, "Model-cache claim settings saved; the next sync applies them.")
            return redirect(f"{_page(slug)}#credentials")
    return tenant_page(request, tenant, tenant_quota_form(request, tenant), storage_form=form, status=400)


def _page(slug: str) -> str:
    from django.urls import reverse

    return reverse("tenant-quota", kwargs={"slug": slug})
