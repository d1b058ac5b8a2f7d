"""Django admin: the audit log (read-only), and the helpers every app's admin uses.

The admin is a window, not a back door: rows whose changes have invariants (state, quota
accounting, audit) are read-only here, and the editable ones save through the same services as
the UI and the API, so an admin edit is audited and mirrored like any other.
"""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin

from core.models import AuditEvent


class ReadOnlyAdmin(admin.ModelAdmin):
    """Browse and search; no add, change or delete (services and tasks write these rows)."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


def register_remaining(app_label: str) -> None:
    """Register every model of the app that has no admin yet, read-only, with its first columns:
    a model added later is browsable at once, and never writable by accident."""
    for model in apps.get_app_config(app_label).get_models():
        if admin.site.is_registered(model):
            continue
        columns = [f.name for f in model._meta.concrete_fields if not f.many_to_many][:6]
        admin.site.register(model, type(f"{model.__name__}Admin", (ReadOnlyAdmin,), {"list_display": columns}))


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created", "actor_name", "action", "tenant", "object_type", "object_id", "reason", "ip_address"]
    list_filter = ["action", "object_type", "tenant"]
    search_fields = ["actor_name", "action", "object_id", "reason", "user_agent"]
    date_hierarchy = "created"
    list_select_related = ["tenant"]


register_remaining("core")
