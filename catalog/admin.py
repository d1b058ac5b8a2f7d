"""Django admin for the catalog. Saves go through catalog.services, so an edit here is checked and
audited (reason "Django admin") like one on the platform pages; a refusal is shown and nothing is
written. The admin site takes staff users only, and staff are platform admins
(quotas.models.is_platform_admin): the standing is a platform admin's. Rows are deactivated, never
deleted (tenant policies name them)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpResponseRedirect

from catalog import services
from catalog.models import CatalogModel
from catalog.permissions import Standing
from core.admin import register_remaining
from core.exceptions import DomainError

REASON = "Django admin"


@admin.register(CatalogModel)
class CatalogModelAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "source", "revision", "task", "gated", "active", "updated"]
    list_filter = ["task", "gated", "active"]
    search_fields = ["name", "display_name", "source"]
    readonly_fields = ["facts_imported_at", "created_by", "updated_by", "created", "updated"]

    def get_readonly_fields(self, request, obj=None):
        return (["name"] if obj is not None else []) + self.readonly_fields

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change):
        values = {k: form.cleaned_data[k] for k in form.cleaned_data if k in services.EDITABLE}
        if change:
            services.catalog_model_update(
                row_id=obj.pk, actor=request.user, standing=Standing.PLATFORM_ADMIN, values=values, reason=REASON
            )
        else:
            row = services.catalog_model_create(
                actor=request.user, standing=Standing.PLATFORM_ADMIN, values=values, reason=REASON
            )
            obj.pk = row.pk

    def changeform_view(self, request, *args, **kwargs):
        try:
            return super().changeform_view(request, *args, **kwargs)
        except DomainError as error:
            messages.error(request, f"Not saved: {error.message}")
            return HttpResponseRedirect(request.get_full_path())


register_remaining("catalog")
