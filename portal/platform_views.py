"""Platform administration pages: tenants (create, edit, quota, policy, archive), GPU flavors, and
a tenant's members (platform admins, and the tenant's own admins).

Thin callers of the same services as the API (quotas.tenants, quotas.members, quotas.flavors,
quotas.services.quota_set, deployments.archive): a refusal from a service becomes a form error.
"""

from __future__ import annotations

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from core.exceptions import DomainError
from core.models import AuditEvent
from deployments.archive import tenant_archive
from deployments.states import REQUESTED, STOPPABLE_BY_POLICY
from quotas import flavors, members, services, tenants
from quotas.forms import (
    ArchiveForm,
    FlavorForm,
    MemberAddForm,
    MemberRoleForm,
    PolicyForm,
    QuotaSetForm,
    TenantForm,
)
from quotas.models import GpuFlavor, Tenant, is_platform_admin
from quotas.nodepools import pool_summary
from quotas.policy import SCALAR_FIELDS
from quotas.presenters import current_quota_values, quota_rows


def _require_platform_admin(request) -> None:
    if not is_platform_admin(request.user):
        raise PermissionDenied("Only platform admins administer the platform.")


def _refused(form, error: DomainError) -> None:
    """Show a service's refusal on the field it names (or above the form); a form may show a
    model field under another name (`FIELD_OF`)."""
    field = getattr(form, "FIELD_OF", {}).get(error.field, error.field)
    form.add_error(field if field in form.fields else None, error.message)


def _data(form) -> dict:
    return dict(form.cleaned_data)


@login_required
def platform_home(request):
    """Tenants with their quota and policy, and the GPU flavors."""
    _require_platform_admin(request)
    tenant_list = Tenant.objects.prefetch_related(
        "allowed_flavors", "allowed_models", "allowed_tiers", "auto_approve_tiers", "quotas__flavor"
    )
    tenant_list = tenant_list.order_by("archived_at", "slug")
    return render(
        request,
        "platform/home.html",
        {"tenants": tenant_list, "flavors": GpuFlavor.objects.order_by("-active", "name")},
    )


@login_required
def tenant_new(request):
    _require_platform_admin(request)
    form = TenantForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            tenant = tenants.tenant_create(actor=request.user, **_data(form))
        except DomainError as error:
            _refused(form, error)
        else:
            messages.success(request, f"Tenant {tenant.slug} created; its namespace and queues follow.")
            return redirect("platform-tenant", slug=tenant.slug)
    return render(request, "platform/tenant_new.html", {"form": form})


def _tenant_forms(request, tenant: Tenant) -> dict:
    """The three forms of a tenant's page; the one that was submitted is bound."""
    posted = request.POST.get("form") if request.method == "POST" else None
    initial = {"slug": tenant.slug, "display_name": tenant.display_name, "cohort": tenant.cohort}
    policy_initial = {field: getattr(tenant, field) for field in SCALAR_FIELDS}
    policy_initial["allowed_flavors"] = list(tenant.allowed_flavors.all())
    policy_initial["allowed_models"] = list(tenant.allowed_models.all())
    policy_initial["allowed_tiers"] = list(tenant.allowed_tiers.all())
    policy_initial["auto_approve_tiers"] = list(tenant.auto_approve_tiers.all())
    policy_initial["allowed_source_patterns"] = "\n".join(tenant.allowed_source_patterns or [])
    return {
        "tenant": TenantForm(
            request.POST if posted == "tenant" else None,
            initial=initial,
            prefix="tenant",
            slug_locked=True,  # an existing tenant's slug never changes (quotas.models.Tenant)
        ),
        "policy": PolicyForm(request.POST if posted == "policy" else None, initial=policy_initial, prefix="policy"),
        "quota": QuotaSetForm(
            request.POST if posted == "quota" else None,
            prefix="quota",
            current=current_quota_values(tenant),
            flavor=_quota_flavor(request, tenant),
        ),
    }


def _quota_flavor(request, tenant: Tenant) -> GpuFlavor | None:
    """The flavor the quota form opens on: ?flavor=<name>, else the tenant's first quota's."""
    name = request.GET.get("flavor")
    if name:
        return GpuFlavor.objects.filter(active=True, name=name).first()
    quota = tenant.quotas.filter(flavor__active=True).select_related("flavor").order_by("flavor__name").first()
    return quota.flavor if quota else None


def _save(request, tenant: Tenant, name: str, form) -> Tenant:
    data = _data(form)
    if name == "tenant":
        return tenants.tenant_update(tenant_id=tenant.pk, actor=request.user, **data)
    if name == "policy":
        ticked = ("allowed_flavors", "allowed_models", "allowed_tiers", "auto_approve_tiers")
        data.update({field: list(data[field]) for field in ticked})
        # A setting the form did not send keeps its value (an unticked box is sent as nothing:
        # the hard stop is off then, and no box ticked in a list is an empty list).
        for field in set(data) - {*ticked, "budget_hard_stop", "reason"}:
            if f"policy-{field}" not in request.POST or (data[field] is None and field != "monthly_budget"):
                data.pop(field)
        return tenants.tenant_policy_set(tenant_id=tenant.pk, actor=request.user, **data)
    values = form.values()  # what the request left out keeps its current value
    services.quota_set(tenant=tenant, flavor=values.pop("flavor"), actor=request.user, **values)
    return tenant


SAVED = {"tenant": "Tenant saved.", "policy": "Policy saved.", "quota": "Quota set; Kueue follows."}


@login_required
def tenant_edit(request, slug: str):
    """One tenant: its names, quota per flavor, request policy, members and archive link."""
    _require_platform_admin(request)
    tenant = get_object_or_404(Tenant, slug=slug)
    forms = _tenant_forms(request, tenant)
    name = request.POST.get("form") if request.method == "POST" else None
    if name in forms and forms[name].is_valid():
        try:
            tenant = _save(request, tenant, name, forms[name])
        except DomainError as error:
            _refused(forms[name], error)
        else:
            messages.success(request, SAVED[name])
            return redirect("platform-tenant", slug=tenant.slug)
    history = AuditEvent.objects.filter(tenant=tenant).select_related("actor")[:30]
    context = {
        "tenant": tenant,
        "forms": forms,
        "rows": quota_rows(tenant),
        "history": history,
        "current_quota": current_quota_values(tenant),
    }
    return render(request, "platform/tenant_edit.html", context)


@login_required
def tenant_archive_confirm(request, slug: str):
    """Confirm archiving: what stops and what is released, then type the slug and a reason."""
    _require_platform_admin(request)
    tenant = get_object_or_404(Tenant, slug=slug, archived_at__isnull=True)
    form = ArchiveForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            tenant_archive(tenant_id=tenant.pk, actor=request.user, **_data(form))
        except DomainError as error:
            _refused(form, error)
        else:
            messages.success(request, f"Tenant {tenant.slug} archived: its deployments are stopping.")
            return redirect("platform")
    # What the archive acts on: requests it cancels and running deployments it stops.
    live = tenant.deployments.filter(state__in=REQUESTED | STOPPABLE_BY_POLICY)
    return render(request, "platform/tenant_archive.html", {"tenant": tenant, "form": form, "live": live})


@login_required
def flavor_edit(request, name: str | None = None):
    """Create a GPU flavor (no name) or change one."""
    _require_platform_admin(request)
    flavor = get_object_or_404(GpuFlavor, name=name) if name else None
    initial = FlavorForm.initial_for(flavor) if flavor else None
    form = FlavorForm(request.POST or None, initial=initial)
    if flavor:
        form.fields["name"].disabled = True
    if request.method == "POST" and form.is_valid():
        data = _data(form)
        reason = data.pop("reason")
        try:
            flavor = flavors.flavor_save(actor=request.user, name=name, values=data, reason=reason)
        except DomainError as error:
            _refused(form, error)
        else:
            messages.success(request, f"Flavor {flavor.name} saved; Kueue follows.")
            for warning in (pool_summary(flavor) or {}).get("warnings", []):
                messages.warning(request, warning)  # saved, but the pool would not work as is
            return redirect("platform")
    pool = pool_summary(flavor) if flavor else None
    if pool and pool["manifest"]:
        pool["manifest_yaml"] = yaml.safe_dump(pool["manifest"], sort_keys=False)
    return render(request, "platform/flavor_form.html", {"form": form, "flavor": flavor, "pool": pool})


def _managed_tenant(request, slug: str) -> Tenant:
    """A tenant the user sees (404 otherwise) and may manage the members of (403 otherwise)."""
    tenant = get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)
    if not members.can_manage_members(tenant, request.user):
        raise PermissionDenied("Only tenant admins manage members.")
    return tenant


@login_required
def tenant_members(request, slug: str):
    """The tenant's members; add one by username or e-mail."""
    tenant = _managed_tenant(request, slug)
    form = MemberAddForm(request.POST or None, prefix="member")
    invite_url = ""
    if request.method == "POST" and form.is_valid():
        try:
            membership = members.membership_add(tenant=tenant, actor=request.user, **_data(form))
        except DomainError as error:
            invite_url = _invite_url(request, error, form.cleaned_data["user"])
            _refused(form, error)  # (takes the field out of cleaned_data)
        else:
            messages.success(request, f"{membership.user.username} added as {membership.get_role_display()}.")
            return redirect("tenant-members", slug=slug)
    rows = tenant.memberships.select_related("user").order_by("user__username")
    context = {"tenant": tenant, "form": form, "rows": rows, "role_form": MemberRoleForm(), "invite_url": invite_url}
    return render(request, "platform/tenant_members.html", context)


def _invite_url(request, error: DomainError, identifier: str) -> str:
    """The invitation page, prefilled, for someone who may invite and met a person with no account."""
    if error.code != "no_account" or not members.can_invite(request.user):
        return ""
    return f"{reverse('platform-invite')}?{urlencode({'email' if '@' in identifier else 'username': identifier})}"


@login_required
@require_POST
def member_change(request, slug: str, username: str):
    """Change one member's role, or remove them (the button pressed says which). Removing asks
    first, on a page of its own (a POST without `confirm`), so it works without JavaScript."""
    tenant = _managed_tenant(request, slug)
    membership = get_object_or_404(tenant.memberships.select_related("user"), user__username=username)
    if request.POST.get("remove") and request.POST.get("confirm") != "1":
        return render(request, "platform/member_remove.html", {"tenant": tenant, "membership": membership})
    form = MemberRoleForm(request.POST)
    try:
        if request.POST.get("remove"):
            members.membership_remove(tenant=tenant, actor=request.user, username=username)
            messages.success(request, f"{username} removed from {tenant.slug}.")
        elif form.is_valid():
            members.membership_set_role(tenant=tenant, actor=request.user, username=username, **_data(form))
            messages.success(
                request, f"{username} is now {dict(form.fields['role'].choices)[form.cleaned_data['role']]}."
            )
        else:
            messages.error(request, "Choose a role.")
    except DomainError as error:
        messages.error(request, error.message)
    return redirect("tenant-members", slug=slug)
