"""Django admin for deployments: read-only. Every change to a deployment has a lifecycle rule, a
quota reservation or a reconcile behind it, so it goes through deployments.services (the
Approvals page, the deployment pages, the API)."""

from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyAdmin, register_remaining
from deployments.models import DeploymentEvent, ModelDeployment


class EventInline(admin.TabularInline):
    model = DeploymentEvent
    fields = ["created", "type", "reason", "from_state", "to_state", "message", "actor"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ModelDeployment)
class ModelDeploymentAdmin(ReadOnlyAdmin):
    list_display = ["name", "tenant", "state", "flavor", "backend", "reserved_gpus", "generation", "created"]
    list_filter = ["state", "backend", "flavor", "tenant"]
    search_fields = ["name", "model_source", "served_model_name", "tenant__slug"]
    list_select_related = ["tenant", "flavor"]
    date_hierarchy = "created"
    inlines = [EventInline]


@admin.register(DeploymentEvent)
class DeploymentEventAdmin(ReadOnlyAdmin):
    list_display = ["created", "deployment", "type", "reason", "from_state", "to_state"]
    list_filter = ["type", "reason", "to_state"]
    search_fields = ["deployment__name", "reason", "message"]
    list_select_related = ["deployment__tenant"]


register_remaining("deployments")
