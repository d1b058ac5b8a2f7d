"""The model catalog's platform pages: the list (search, filter by task and size), create, edit,
deactivate and import facts. Platform admins only; thin callers of catalog.services (a refusal
becomes a form error), with the same FilterSet as the API."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from catalog import services
from catalog.filtersets import CatalogModelFilter
from catalog.forms import CatalogModelForm
from catalog.models import CatalogModel
from catalog.permissions import CatalogAction, Standing, allowed
from core.exceptions import DomainError
from portal.catalog_api import standing_of


def _require_admin(request) -> Standing:
    standing = standing_of(request.user)
    if not allowed(standing, CatalogAction.CREATE):
        raise PermissionDenied("Only platform admins manage the model catalog.")
    return standing


@login_required
def catalog_list(request):
    """Every catalog row, filtered by the API's FilterSet (task, size, search, active)."""
    _require_admin(request)
    filterset = CatalogModelFilter(request.GET or None, queryset=CatalogModel.objects.all())
    rows = filterset.qs if filterset.is_valid() else CatalogModel.objects.none()
    return render(request, "catalog/catalogmodel_list.html", {"filter": filterset, "rows": rows})


@login_required
def catalog_edit(request, name: str | None = None):
    """Create a catalog row (no name) or change one; its facts can be imported on the same page."""
    standing = _require_admin(request)
    row = get_object_or_404(CatalogModel, name=name) if name else None
    form = CatalogModelForm(request.POST or None, instance=row)
    if request.method == "POST" and form.is_valid():
        reason = form.cleaned_data.get("reason", "")
        try:
            if row is None:
                row = services.catalog_model_create(
                    actor=request.user, standing=standing, values=form.values(), reason=reason
                )
            else:
                row = services.catalog_model_update(
                    row_id=row.pk, actor=request.user, standing=standing, values=form.values(), reason=reason
                )
        except DomainError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        else:
            messages.success(request, f"Catalog model {row.name} saved.")
            return redirect("platform-catalog-model", name=row.name)
    s3_import = bool(settings.MODEL_IMPORT_S3_ENDPOINT_URL)
    return render(request, "catalog/catalogmodel_form.html", {"form": form, "row": row, "s3_import": s3_import})


@login_required
@require_POST
def catalog_deactivate(request, name: str):
    standing = _require_admin(request)
    row = get_object_or_404(CatalogModel, name=name)
    try:
        services.catalog_model_deactivate(row_id=row.pk, actor=request.user, standing=standing)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"{row.name} is no longer offered; running deployments keep running.")
    return redirect("platform-catalog-model", name=row.name)


@login_required
@require_POST
def catalog_import_facts(request, name: str):
    standing = _require_admin(request)
    row = get_object_or_404(CatalogModel, name=name)
    path = (request.POST.get("path") or "").strip()[:4096]
    try:
        services.catalog_model_import_facts(row_id=row.pk, actor=request.user, standing=standing, path=path)
    except DomainError as error:
        messages.error(request, f"Facts not imported: {error.message}")
    else:
        messages.success(request, f"Facts of {row.name} imported.")
    return redirect("platform-catalog-model", name=row.name)
