"""Browser views for quotas: the tenant quota page, requests and decisions."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.exceptions import DomainError
from core.models import AuditEvent
from core.redirects import safe_next
from quotas import services
from quotas.choices import Role
from quotas.forms import DecisionForm, QuotaRequestForm
from quotas.models import QuotaChangeRequest, Tenant
from quotas.presenters import current_quota_values, quota_rows
from quotas.secret_views import secrets_context


@login_required
def quota_overview(request):
    tenants = list(Tenant.objects.visible_to(request.user))
    if len(tenants) == 1:
        return redirect("tenant-quota", slug=tenants[0].slug)
    return render(request, "quotas/overview.html", {"rows": [(t, quota_rows(t)) for t in tenants]})


@login_required
def tenant_quota(request, slug: str):
    """Quota bars, change history and (for tenant admins) the request form."""
    tenant = get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)
    form = tenant_quota_form(request, tenant, request.POST or None)
    if request.method == "POST" and form is not None and form.is_valid():
        try:
            services.quota_change_request_create(tenant=tenant, user=request.user, **form.cleaned_data)
        except DomainError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        else:
            messages.success(request, "Quota change requested; a platform admin will decide.")
            return redirect("tenant-quota", slug=slug)
    return tenant_page(request, tenant, form)


def tenant_quota_form(request, tenant: Tenant, data=None):
    """The quota request form for tenant admins, else None."""
    if not tenant.has_role(request.user, Role.TENANT_ADMIN):
        return None
    return QuotaRequestForm(data)


def tenant_page(request, tenant: Tenant, form, *, secret_forms=None, storage_form=None, status: int = 200):
    """The tenant's page (quota, requests, storage and credentials, audit trail); the credential
    views render it again with a bound form that has errors (quotas.secret_views)."""
    history = AuditEvent.objects.filter(tenant=tenant, action__startswith="quota").select_related("actor")[:50]
    return render(
        request,
        "quotas/tenant_quota.html",
        {
            "tenant": tenant,
            "rows": quota_rows(tenant),
            "current_quota": current_quota_values(tenant) if form else None,
            "form": form,
            "history": history,
            "requests": tenant.quota_requests.select_related("flavor", "requested_by", "decided_by")[:30],
            "decide_form": DecisionForm(),
            **secrets_context(request, tenant, secret_forms or {}, storage_form),
        },
        status=status,
    )


@login_required
@require_POST
def quota_request_decide(request, pk: int, decision: str):
    """Platform admins approve or reject a quota change (reason required to reject)."""
    if decision not in ("approve", "reject"):
        raise Http404("unknown decision")
    qcr = get_object_or_404(QuotaChangeRequest.objects.visible_to(request.user), pk=pk)
    form = DecisionForm(request.POST)
    form.is_valid()
    comment = form.cleaned_data.get("comment", "")
    decide = services.quota_change_approve if decision == "approve" else services.quota_change_reject
    try:
        decide(request_id=qcr.pk, approver=request.user, comment=comment)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, "Quota request approved." if decision == "approve" else "Quota request rejected.")
    return redirect(safe_next(request, "approvals"))
