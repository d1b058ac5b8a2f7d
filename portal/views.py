"""Browser views that are not about one app: overview, approvals inbox, cluster, API tokens."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from core.exceptions import DomainError
from deployments.choices import RevisionStatus
from deployments.forms import ApprovalDecisionForm
from deployments.models import DeploymentRevision, ModelDeployment
from deployments.presenters import change_view
from deployments.reconcile import last_orphans, last_pending_workloads, orphan_delete
from deployments.states import GONE
from deployments.views import revision_decide
from metrics.presenters import busiest as metrics_busiest
from metrics.presenters import latest_samples
from portal.api import ApiToken, token_create, token_revoke
from quotas.choices import QuotaChangeStatus
from quotas.models import GpuFlavor, QuotaChangeRequest, Tenant, TenantQuota, is_platform_admin
from quotas.presenters import quota_rows
from runtime.backends import presence
from runtime.k8s import ClusterError
from runtime.platform import platform_spec
from runtime.preemption import preemption_settings
from usage.presenters import overview_usage


@login_required
def home(request):
    """Overview: per tenant, quota bars and deployments with live badges and tokens/s."""
    tenants = list(Tenant.objects.visible_to(request.user))
    usage = overview_usage(tenants)  # the usage ledger's figures for this month (usage.reports)
    blocks = []
    for tenant in tenants:
        deps = list(tenant.deployments.live().select_related("flavor")[:50])
        blocks.append(
            {
                "tenant": tenant,
                "quotas": quota_rows(tenant),
                "deployments": deps,
                "can_request": tenant.has_role(request.user, "member"),
                "latest": latest_samples(deps),
                "usage": usage[tenant.pk],
            }
        )
    return render(request, "portal/home.html", {"blocks": blocks})


@login_required
def approvals(request):
    """Platform admins: every proposed revision (first requests and changes to approved
    deployments) with the change being approved, and the quota changes waiting. A decision is
    POSTed here, bound to the revision shown: a stale one is an error on that proposal's form and
    nothing changes."""
    if not is_platform_admin(request.user):
        raise PermissionDenied
    failed, status = None, 200
    if request.method == "POST":
        failed = _decide(request)
        if failed is None:
            return redirect("approvals")
        status = failed["status"]
    quota_requests = (
        QuotaChangeRequest.objects.filter(status=QuotaChangeStatus.PENDING)
        .select_related("tenant", "flavor", "requested_by")
        .order_by("created")
    )
    pending = _proposals()
    if failed is not None:  # beside its proposal's forms, or on top when that proposal is gone
        failed["shown"] = any(row["dep"].pk == failed["deployment"] for row in pending)
    context = {"pending": pending, "quota_requests": quota_requests, "failed": failed}
    return render(request, "portal/approvals.html", context, status=status)


def _decide(request) -> dict | None:
    """Approve or reject the revision an approvals form names (deployments.views.revision_decide).
    None when done; else {"deployment", "errors", "status"} for the page to show beside the form."""
    form = ApprovalDecisionForm(request.POST)
    if not form.is_valid():
        return {"deployment": None, "errors": [f"{k}: {' '.join(v)}" for k, v in form.errors.items()], "status": 400}
    dep = get_object_or_404(ModelDeployment.objects.live(), pk=form.cleaned_data["deployment"])
    error = revision_decide(request, dep, form.cleaned_data["decision"], form)
    if error is None:
        return None
    return {"deployment": dep.pk, "errors": [error.message], "status": error.status_code}


def _proposals() -> list[dict]:
    """Each proposed revision with its change (deployments.presenters.change_view: diff, GPU and
    cost delta, how it is applied) and whether its GPUs fit the tenant's quota."""
    from quotas.services import quota_preview

    revisions = (
        DeploymentRevision.objects.filter(status=RevisionStatus.PROPOSED)
        .exclude(deployment__state__in=GONE)
        .select_related("deployment__tenant", "deployment__flavor", "deployment__serving_revision", "proposed_by")
        .order_by("proposed_at", "pk")
    )
    rows = []
    for rev in revisions:
        dep = rev.deployment
        flavor = GpuFlavor.objects.filter(pk=rev.spec.get("flavor")).first() or dep.flavor
        credit = dep.reserved_gpus if flavor.pk == dep.flavor_id else 0  # GPUs it holds on that flavor
        fit = quota_preview(tenant=dep.tenant, flavor=flavor, gpus=rev.gpus, credit_gpus=credit)
        rows.append({"dep": dep, "rev": rev, "change": change_view(dep, rev), "fit": fit, "flavor": flavor})
    return rows


@login_required
def cluster(request):
    """Platform admins: quota and usage by cohort, tenant and flavor; busiest deployments."""
    if not is_platform_admin(request.user):
        raise PermissionDenied
    quotas = TenantQuota.objects.select_related("tenant", "flavor").order_by("tenant__slug", "flavor__name")
    busiest = metrics_busiest(minutes=5, limit=10)  # each deployment once (metrics.presenters)
    from django.db.models import Sum

    from metrics.charts import QuotaRow, figure_json, quota_bars

    figure = quota_bars(
        [
            QuotaRow(f"{q.tenant.slug} / {q.flavor.name}", q.reserved_gpus, q.nominal_gpus, q.borrowing_limit_gpus)
            for q in quotas
        ],
        title="GPU quota by tenant and flavor",
    )
    totals = (
        TenantQuota.objects.values("flavor__name")
        .annotate(nominal=Sum("nominal_gpus"), reserved=Sum("reserved_gpus"))
        .order_by("flavor__name")
    )
    return render(
        request,
        "portal/cluster.html",
        {
            "quotas": quotas,
            "tenants": Tenant.objects.all(),
            "busiest": busiest,
            "totals": totals,
            "quota_figure": figure_json(figure),
            "orphans": last_orphans(),
            "pending": sorted(last_pending_workloads().items()),
            "backends": presence(),  # which backends the last sweep found installed on the cluster
            "queueing_strategy": settings.KUEUE_QUEUEING_STRATEGY,
            "preemption": preemption_settings(platform_spec()),  # the same words as the API's
        },
    )


@login_required
def orphan_delete_view(request, backend: str, namespace: str, name: str):
    """Platform admins: confirm (GET), then delete (POST) an object the last sweep found orphaned."""
    if not is_platform_admin(request.user):
        raise PermissionDenied
    orphan = next(
        (o for o in last_orphans() if (o["backend"], o["namespace"], o["name"]) == (backend, namespace, name)), None
    )
    if orphan is None:
        raise Http404("The last sweep did not report this object as orphaned.")
    if request.method != "POST":
        return render(request, "portal/orphan_confirm.html", {"orphan": orphan})
    try:
        deleted = orphan_delete(actor=request.user, backend=backend, namespace=namespace, name=name)
    except (LookupError, ValueError, ClusterError) as error:
        messages.error(request, str(error))
    else:
        messages.success(
            request, f"{orphan['kind']} {namespace}/{name} {'deleted' if deleted else 'was already gone'}."
        )
    return redirect("cluster")


@login_required
def tokens(request):
    """API tokens: create (shown once), list, revoke."""
    created = None
    if request.method == "POST":
        name = (request.POST.get("name") or "").strip()
        days = request.POST.get("expires_in_days") or "90"
        from portal.api import TokenSerializer

        form = TokenSerializer(data={"name": name, "expires_in_days": days})
        if form.is_valid():
            try:
                _, created = token_create(user=request.user, **form.validated_data)
            except DomainError as error:  # the limit on tokens (core.limits)
                messages.error(request, error.message)
            else:
                messages.success(request, "Token created. Copy it now: it is not shown again.")
        else:
            for field, errors in form.errors.items():
                label = "Expires in (days)" if field == "expires_in_days" else field.replace("_", " ").capitalize()
                messages.error(request, f"{label}: {' '.join(errors)}")
    items = ApiToken.objects.filter(user=request.user).order_by("-created")
    return render(request, "portal/tokens.html", {"tokens": items, "created": created, "now": timezone.now()})


@login_required
def token_revoke_view(request, key: str):
    """Revoke one of your tokens after a confirmation page (GET, or a POST without `confirm`):
    it works without JavaScript. The API's DELETE stays one call."""
    token = get_object_or_404(ApiToken, user=request.user, token_key=key)
    if request.method != "POST" or request.POST.get("confirm") != "1":
        return render(request, "portal/token_revoke.html", {"token": token})
    token_revoke(user=request.user, token=token)
    messages.success(request, f"Token {token.name} revoked.")
    return redirect("tokens")
