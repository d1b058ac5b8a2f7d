"""Django admin for tenants, memberships, flavors and quotas.

Saves go through the services (quotas.tenants, quotas.members, quotas.flavors, quota_set), so an
edit here is checked, audited (reason "Django admin") and mirrored to Kueue like one made on the
platform pages; a refusal shows as an error message and nothing is written. Accounting and state
(reserved GPUs, reservations, quota-change decisions, Kueue status, archiving) are read-only.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpResponseRedirect

from core.admin import ReadOnlyAdmin, register_remaining
from core.exceptions import DomainError
from quotas import flavors, members, services, tenants
from quotas.models import GpuFlavor, Membership, QuotaChangeRequest, QuotaReservation, Tenant, TenantQuota

REASON = "Django admin"


class ServiceSaveMixin:
    """Save through the model's service (`save_through_service`) instead of `obj.save()`.

    The admin's add/change/delete views run in one transaction: a refusal from the service
    rolls all of it back, and the admin comes back to the same page with the reason."""

    def save_model(self, request, obj, form, change):
        self.save_through_service(request, obj, form, change)

    def _refusable(self, view, request, *args, **kwargs):
        try:
            return view(request, *args, **kwargs)
        except DomainError as error:
            messages.error(request, f"Not saved: {error.message}")
            return HttpResponseRedirect(request.get_full_path())

    def changeform_view(self, request, *args, **kwargs):
        return self._refusable(super().changeform_view, request, *args, **kwargs)

    def delete_view(self, request, *args, **kwargs):
        return self._refusable(super().delete_view, request, *args, **kwargs)


class QuotaInline(admin.TabularInline):
    model = TenantQuota
    fields = ["flavor", "nominal_gpus", "borrowing_limit_gpus", "lending_limit_gpus", "reserved_gpus"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(ServiceSaveMixin, admin.ModelAdmin):
    list_display = [
        "slug",
        "display_name",
        "cohort",
        "auto_approve_max_gpus",
        "max_gpus_per_deployment",
        "namespace_created",
        "archived_at",
    ]
    list_filter = [("archived_at", admin.EmptyFieldListFilter), "cohort"]
    search_fields = ["slug", "display_name"]
    fields = [
        "slug",
        "display_name",
        "cohort",
        "auto_approve_max_gpus",
        "max_gpus_per_deployment",
        "allowed_flavors",
        "namespace_created",
        "archived_at",
        "kueue_status",
        "created",
    ]
    # The request policy and archiving have their own checks and confirmation: the Platform pages.
    readonly_fields = [
        "auto_approve_max_gpus",
        "max_gpus_per_deployment",
        "allowed_flavors",
        "namespace_created",
        "archived_at",
        "kueue_status",
        "created",
    ]
    inlines = [QuotaInline]

    def get_inlines(self, request, obj):
        return self.inlines if obj is not None else []

    def get_readonly_fields(self, request, obj=None):
        locked = ["slug"] if obj is not None else []  # fixed once the tenant exists (Tenant says why)
        return locked + self.readonly_fields

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # deployments and quotas refer to it: archive on the Platform page instead

    def save_through_service(self, request, obj, form, change):
        values = {k: form.cleaned_data[k] for k in ("slug", "display_name", "cohort") if k in form.cleaned_data}
        if change:
            tenants.tenant_update(tenant_id=obj.pk, actor=request.user, reason=REASON, **values)
        else:
            obj.pk = tenants.tenant_create(actor=request.user, reason=REASON, **values).pk

    def save_related(self, request, form, formsets, change):
        pass  # the inline and the policy are read-only here


@admin.register(Membership)
class MembershipAdmin(ServiceSaveMixin, admin.ModelAdmin):
    list_display = ["user", "tenant", "role", "source"]
    list_filter = ["role", "source", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__slug"]
    list_select_related = ["user", "tenant"]
    readonly_fields = ["source"]
    autocomplete_fields = ["user"]

    def get_readonly_fields(self, request, obj=None):
        return ["user", "tenant", "source"] if obj is not None else ["source"]

    def save_through_service(self, request, obj, form, change):
        if change:
            members.membership_set_role(
                tenant=obj.tenant, actor=request.user, username=obj.user.username, role=obj.role, reason=REASON
            )
        else:
            created = members.membership_add(
                tenant=obj.tenant, actor=request.user, user=obj.user.username, role=obj.role, reason=REASON
            )
            obj.pk = created.pk

    def delete_model(self, request, obj):
        members.membership_remove(tenant=obj.tenant, actor=request.user, username=obj.user.username, reason=REASON)

    def delete_queryset(self, request, queryset):
        for membership in queryset.select_related("tenant", "user"):
            try:
                self.delete_model(request, membership)
            except DomainError as error:
                messages.error(request, f"{membership}: not removed: {error.message}")


@admin.register(GpuFlavor)
class GpuFlavorAdmin(ServiceSaveMixin, admin.ModelAdmin):
    list_display = ["name", "gpu_model", "gpu_memory_gib", "gpus_per_node", "price_per_gpu_hour", "active"]
    list_filter = ["active", "accelerator_type"]
    search_fields = ["name", "gpu_model", "accelerator_type"]
    actions = ["retire"]

    def get_readonly_fields(self, request, obj=None):
        return ["name"] if obj is not None else []

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # quotas and deployments refer to it: retire instead

    def save_through_service(self, request, obj, form, change):
        values = {k: v for k, v in form.cleaned_data.items() if k in flavors.FIELDS}
        saved = flavors.flavor_save(actor=request.user, name=obj.name if change else None, values=values, reason=REASON)
        obj.pk = saved.pk

    @admin.action(description="Retire the selected flavors (no new requests or quotas)")
    def retire(self, request, queryset):
        for flavor in queryset:
            flavors.flavor_retire(actor=request.user, name=flavor.name, reason=REASON)


@admin.register(TenantQuota)
class TenantQuotaAdmin(ServiceSaveMixin, admin.ModelAdmin):
    list_display = ["tenant", "flavor", "nominal_gpus", "borrowing_limit_gpus", "lending_limit_gpus", "reserved_gpus"]
    list_filter = ["flavor", "tenant"]
    search_fields = ["tenant__slug", "flavor__name"]
    list_select_related = ["tenant", "flavor"]

    def get_readonly_fields(self, request, obj=None):
        return ["tenant", "flavor", "reserved_gpus", "updated"] if obj is not None else ["reserved_gpus", "updated"]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # reservations refer to it: set it to zero instead

    def save_through_service(self, request, obj, form, change):
        saved = services.quota_set(
            tenant=obj.tenant,
            flavor=obj.flavor,
            actor=request.user,
            nominal_gpus=obj.nominal_gpus,
            borrowing_limit_gpus=obj.borrowing_limit_gpus,
            lending_limit_gpus=obj.lending_limit_gpus,
            reason=REASON,
        )
        obj.pk = saved.pk


@admin.register(QuotaReservation)
class QuotaReservationAdmin(ReadOnlyAdmin):
    list_display = ["quota", "owner_type", "owner_id", "gpus", "borrowed_gpus", "created", "released"]
    list_filter = [("released", admin.EmptyFieldListFilter), "owner_type"]
    search_fields = ["owner_id", "quota__tenant__slug"]
    list_select_related = ["quota__tenant", "quota__flavor"]


@admin.register(QuotaChangeRequest)
class QuotaChangeRequestAdmin(ReadOnlyAdmin):
    """Decisions are taken on the Approvals page (audited, reason required to reject)."""

    list_display = ["tenant", "flavor", "nominal_gpus", "borrowing_limit_gpus", "status", "requested_by", "created"]
    list_filter = ["status", "flavor", "tenant"]
    search_fields = ["tenant__slug", "justification", "requested_by__username"]
    list_select_related = ["tenant", "flavor", "requested_by"]


register_remaining("quotas")
