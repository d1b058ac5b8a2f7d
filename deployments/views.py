"""Browser views for deployments. Each is a thin caller of the same services as the API."""

from __future__ import annotations

from urllib.parse import urlencode

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from catalog.choices import Task
from catalog.models import CatalogModel
from catalog.sizes import SIZE_CHOICES
from core.exceptions import DomainError, Forbidden
from core.params import query_int
from core.redirects import safe_next
from deployments import services
from deployments.changes import revision_pair_diff
from deployments.choices import ServingProfile
from deployments.filtersets import DeploymentFilterSet
from deployments.forms import (
    DeploymentEditForm,
    DeploymentForm,
    RevisionDiffForm,
    RevisionForm,
    ScaleForm,
    TryForm,
    form_error_text,
)
from deployments.models import ModelDeployment
from deployments.panels import extra_list_context
from deployments.picker import allowed_rows
from deployments.picker import filters as picker_filters
from deployments.presenters import (
    confirm_context,
    default_pair,
    detail_context,
    history_rows,
    proposal_outcome,
    revision_context,
    revision_done,
    revision_snapshot,
)
from deployments.states import READ_ACTIONS, Action, actions_for, actor_of, authorize


def _visible(request, pk: int) -> ModelDeployment:
    return get_object_or_404(
        ModelDeployment.objects.visible_to(request.user).live().select_related("tenant", "flavor", "created_by"), pk=pk
    )


@login_required
def deployment_list(request):
    """All deployments you can see, filtered by the same FilterSet as the API."""
    qs = ModelDeployment.objects.visible_to(request.user).live().select_related("tenant", "flavor")
    filterset = DeploymentFilterSet(request.GET, queryset=qs)
    deployments = list(filterset.qs[:200])
    context = {"filter": filterset, "deployments": deployments, **extra_list_context(request, deployments)}
    template = "deployments/_deployment_rows.html" if request.htmx else "deployments/deployment_list.html"
    return render(request, template, context)


@login_required
def deployment_new(request):
    """Request a deployment: hardware tiles, engine options, live quota and memory fit."""
    form = DeploymentForm(request.POST or None, user=request.user, initial={"tenant": request.GET.get("tenant")})
    if not form.fields["tenant"].queryset.exists():
        raise PermissionDenied("Only members of a tenant may request deployments; viewers can look, not request.")
    if request.method == "GET" and _wants_cards(request):
        return _cards(request, form)
    if request.method == "POST" and form.wants_profile_applied():
        return _show_applied(request, form)
    if request.method == "POST" and form.is_valid():
        data = {k: v for k, v in form.cleaned_data.items() if k != "tenant"}
        data["quantization"] = data.get("quantization") or ""
        try:
            dep = services.deployment_create(tenant=form.cleaned_data["tenant"], user=request.user, data=data)
        except services.DraftInvalid as error:
            for field, message in error.errors.items():
                form.add_error(field if field in form.fields else None, message)
        except DomainError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        else:
            messages.success(
                request,
                f"Requested {dep.name}: "
                + (
                    "approved automatically by your tenant's policy."
                    if dep.serving_revision_id
                    else "waiting for a platform admin's approval."
                ),
            )
            return redirect("deployment-detail", pk=dep.pk)
    return _form_page(request, form)


def _form_page(request, form: DeploymentForm, **context):
    """The request or edit page; its fit panel shows the check of what is filled in already."""
    if not form.is_bound:
        _take_card(request, form)
    context = {"form": form, "panel": form.for_panel(), "picker": _picker(request, form), **context}
    return render(request, "deployments/deployment_form.html", context)


def _take_card(request, form: DeploymentForm) -> None:
    """A card picked without the script (its link, ?catalog_model=<name>): the form opens with it
    chosen and its source and revision filled in, where the tenant's policy allows the model."""
    name = request.GET.get("catalog_model", "")[:100]
    rows = allowed_rows(form.quota_tenant(), name=name) if name else []
    if rows:
        row = rows[0]
        form.initial |= {
            "catalog_model": name,
            "model_source": row.source,
            "model_revision": row.revision,
            "task": row.task,
        }


def _picker(request, form: DeploymentForm) -> dict:
    """The catalog picker: the cards for the search, task and size filters in the query string
    (?q=&task=&size=; a filter is a plain GET, or an htmx one that swaps the cards alone)."""
    chosen = picker_filters(request.GET)
    selected = form["catalog_model"].value() or request.GET.get("catalog_model") or ""
    if isinstance(selected, CatalogModel):
        selected = selected.name
    cards = form.picker_cards(**chosen)
    if selected and not any(card.row.name == selected for card in cards):  # the pick stays when filtered out
        cards = [c for c in form.picker_cards() if c.row.name == selected] + cards
    tenant = form.quota_tenant()
    # What a card's link (no script) keeps of the page: the tenant chosen and the filters.
    kept = {"tenant": tenant.pk if tenant and "tenant" in form.fields else "", "q": chosen["text"]}
    kept |= {"task": chosen["task"], "size": chosen["size"]}
    return {
        "cards": cards,
        "q": chosen["text"],
        "task": chosen["task"],
        "tasks": Task.choices,
        "size": chosen["size"],
        "sizes": SIZE_CHOICES,
        "selected": str(selected),
        "tenant": tenant,
        "kept": urlencode({k: v for k, v in kept.items() if v}),
    }


def _wants_cards(request) -> bool:
    return bool(request.htmx) and request.htmx.target == "catalog-cards"


def _cards(request, form: DeploymentForm):
    """htmx: the picker's cards alone, for the search, task and size filters."""
    return render(request, "deployments/_catalog_cards.html", {"form": form, "picker": _picker(request, form)})


def _show_applied(request, form: DeploymentForm, dep: ModelDeployment | None = None):
    """The form again with the chosen serving profile's values filled in (no script needed)."""
    form = form.applied()
    if form.preset is None:
        messages.info(request, "Choose the hardware and a serving profile, then apply it.")
    else:
        label = ServingProfile(form.preset.profile).label
        messages.info(request, f"Applied the {label} profile: check the values (each is yours to edit), then submit.")
    context = {"dep": dep}
    if dep is not None:
        context |= {"serving_rev": dep.serving_revision, "waiting": dep.proposed_number}
    return _form_page(request, form, **context)


def _draft_form(request) -> DeploymentForm:
    """The request form (or, with ?deployment=<id>, the edit form) bound to the POSTed draft."""
    editing = query_int(request.GET, "deployment", minimum=1)
    if editing is not None:
        return DeploymentEditForm(request.POST, deployment=_visible(request, editing), user=request.user)
    return DeploymentForm(request.POST, user=request.user)


@login_required
def deployment_profile(request):
    """The form's script: the chosen serving profile's values for the form as typed so far
    (JSON; GET /api/v1/serving-profiles/ answers API users from the same function)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    _, preset = _draft_form(request).with_profile()
    if preset is None:  # nothing to fill yet: a normal state of a form being typed, not an error
        return JsonResponse({"error": "Choose the hardware and a serving profile first."})
    return JsonResponse(preset.as_dict())


@login_required
def deployment_preview(request):
    """htmx: every problem, the quota and memory fit and the price per hour for the form as typed
    so far (creates nothing); the hardware tiles' "no quota" marks follow the chosen tenant."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    form = _draft_form(request)
    form.is_valid()
    return render(request, "deployments/_preview.html", {"form": form, "check": form.check, "oob": True})


@login_required
def deployment_detail(request, pk: int):
    """The deployment: what serves (its revision), the change waiting for approval, status, metrics."""
    return _detail_page(request, _visible(request, pk))


@login_required
def deployment_status(request, pk: int):
    """htmx partial polled by the detail page: badge, conditions, Kueue story, advice."""
    dep = _visible(request, pk)
    return render(request, "deployments/_status.html", detail_context(request, dep))


@login_required
def deployment_badge(request, pk: int):
    dep = _visible(request, pk)
    return render(request, "deployments/_badge.html", {"dep": dep})


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (serveConfigV2) as YAML block scalars, readable as in `kubectl get -o yaml`."""


_BlockDumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None),
)


@login_required
def deployment_manifest(request, pk: int):
    """htmx: what the runtime applies (the API's GET deployments/<id>/manifest/ returns the same)."""
    dep = _visible(request, pk)
    from deployments.presenters import rendered_manifest

    preview = rendered_manifest(dep)
    obj = preview["object"]
    text = preview["error"] if obj is None else yaml.dump(obj, Dumper=_BlockDumper, sort_keys=False)
    return render(request, "deployments/_manifest.html", {"manifest": text, "preview": preview})


@login_required
@require_POST
def deployment_try(request, pk: int):
    """htmx: send one prompt to the deployment and show the answer and the latency (the API's
    POST deployments/<id>/try/ does the same)."""
    from deployments.trying import try_prompt

    dep = _visible(request, pk)
    form = TryForm(request.POST)
    if not form.is_valid():
        return render(request, "deployments/_try_result.html", {"error": form_error_text(form)})
    return render(request, "deployments/_try_result.html", try_prompt(dep, **form.cleaned_data))


def _detail_page(request, dep: ModelDeployment, *, decision_form=None, status: int = 200):
    context = detail_context(request, dep) | revision_context(request, dep, decision_form)
    return render(request, "deployments/deployment_detail.html", context, status=status)


def _propose(form, call) -> bool:
    """Run a service that proposes a change; its refusals become the form's errors."""
    try:
        call()
    except services.DraftInvalid as error:
        for field, message in error.errors.items():
            form.add_error(field if field in form.fields else None, message)
    except DomainError as error:
        form.add_error(error.field if error.field in form.fields else None, error.message)
    else:
        return True
    return False


@login_required
def deployment_edit(request, pk: int):
    """Propose a change to the spec: the API's PATCH deployments/<id>/, as a form. The service
    decides whether it serves at once (no approval needed, or the tenant's policy) or waits for
    a platform admin while the serving revision runs on; the detail page then says which."""
    dep = _visible(request, pk)
    if Action.UPDATE not in actions_for(actor_of(dep.tenant, request.user), dep.state):
        raise PermissionDenied("Only members of the tenant may change a deployment, and not in this state.")
    form = DeploymentEditForm(request.POST or None, deployment=dep, user=request.user)
    if request.method == "GET" and _wants_cards(request):
        return _cards(request, form)
    if request.method == "POST" and form.wants_profile_applied():
        return _show_applied(request, form, dep=dep)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data, quantization=form.cleaned_data.get("quantization") or "")
        data["served_model_name"] = data.get("served_model_name") or dep.name
        before = revision_snapshot(dep)
        if _propose(form, lambda: services.deployment_update(deployment_id=dep.pk, user=request.user, data=data)):
            messages.success(request, proposal_outcome(dep, before))
            return redirect("deployment-detail", pk=dep.pk)
    return _form_page(request, form, dep=dep, serving_rev=dep.serving_revision, waiting=dep.proposed_number)


LIFECYCLE = {
    "cancel": (
        lambda dep, user: services.deployment_cancel(deployment_id=dep.pk, user=user),
        "Cancelled the request: nothing of it ever ran, and a cancelled request is final.",
    ),
    "stop": (lambda dep, user: services.deployment_stop(deployment_id=dep.pk, user=user), "Stopping."),
    "start": (lambda dep, user: services.deployment_start(deployment_id=dep.pk, user=user), "Starting."),
    "delete": (lambda dep, user: services.deployment_delete(deployment_id=dep.pk, user=user), "Deleting."),
}
# The actions on one revision, bound to the number the form names (RevisionForm).
ON_REVISION = {
    "approve": lambda dep, user, data: services.deployment_approve(
        deployment_id=dep.pk, approver=user, revision=data["revision"], reason=data["reason"]
    ),
    "reject": lambda dep, user, data: services.deployment_reject(
        deployment_id=dep.pk, approver=user, revision=data["revision"], reason=data["reason"]
    ),
    "withdraw": lambda dep, user, data: services.deployment_withdraw(
        deployment_id=dep.pk, user=user, revision=data["revision"]
    ),
    "rollback": lambda dep, user, data: services.deployment_rollback(
        deployment_id=dep.pk, user=user, revision=data["revision"]
    ),
}
# An admin's decision refused about its revision (stale, unknown, a rejection without a reason) is
# a form error on the page they decided on; the others come back as a message on the detail page.
DECISIONS = ("approve", "reject")


@login_required
@require_POST
def deployment_action(request, pk: int, action: str):
    """One POST endpoint per action; errors come back as a message on the page."""
    dep = _visible(request, pk)
    if action == "scale":
        return _scale(request, dep)
    if action in ON_REVISION:
        return _revision_action(request, dep, action)
    if action not in LIFECYCLE:
        raise Http404("unknown action")
    call, done = LIFECYCLE[action]
    try:
        call(dep, request.user)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, done)
    return redirect(safe_next(request, "deployment-detail", pk=pk))


def _scale(request, dep: ModelDeployment):
    form = ScaleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Scale: " + form_error_text(form))
        return redirect(safe_next(request, "deployment-detail", pk=dep.pk))
    before = revision_snapshot(dep)
    try:
        services.deployment_scale(deployment_id=dep.pk, user=request.user, **form.cleaned_data)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, proposal_outcome(dep, before))
    return redirect(safe_next(request, "deployment-detail", pk=dep.pk))


def revision_decide(request, dep: ModelDeployment, action: str, form) -> DomainError | None:
    """Run `action` on the revision a valid `form` names (None: done, with its message queued).
    A refusal about the form's own fields is added to it and returned; the approvals page
    (portal.views) decides through this function as well."""
    before = revision_snapshot(dep)
    try:
        ON_REVISION[action](dep, request.user, form.cleaned_data)
    except DomainError as error:
        if error.field in form.fields:
            form.add_error(error.field, error.message)
        return error
    messages.success(request, revision_done(dep, action, form.cleaned_data["revision"], before))
    return None


def _revision_action(request, dep: ModelDeployment, action: str):
    back = redirect(safe_next(request, "deployment-detail", pk=dep.pk))
    try:  # who may, in this state, before what they sent: a refusal reads the same with any body
        authorize(actor_of(dep.tenant, request.user), dep.state, Action(action))
    except DomainError as error:
        messages.error(request, error.message)
        return back
    form = RevisionForm(request.POST)
    if not form.is_valid():
        return _detail_page(request, dep, decision_form=form, status=400)
    error = revision_decide(request, dep, action, form)
    if error is None:
        return back
    if action not in DECISIONS or error.field not in form.fields:
        messages.error(request, error.message)
        return back
    dep = _visible(request, dep.pk)
    return _detail_page(request, dep, decision_form=form, status=error.status_code)


# Actions that ask first: GET shows what would happen and a button that POSTs (no script needed).
CONFIRMED = {"cancel": Action.CANCEL, "stop": Action.STOP, "withdraw": Action.WITHDRAW, "delete": Action.DELETE}


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def deployment_confirm(request, pk: int, action: str):
    """Cancel a request, stop what runs, withdraw a proposed change or delete, after a confirmation page."""
    if request.method == "POST":
        return deployment_action(request, pk=pk, action=action)
    dep = _visible(request, pk)
    rev = dep.proposed_revision if action == "withdraw" else None
    try:
        authorize(actor_of(dep.tenant, request.user), dep.state, CONFIRMED[action])
        asked = request.GET.get("revision", "")
        if action == "withdraw" and (rev is None or asked not in ("", str(rev.number))):
            gone = f"Revision {asked} is not waiting for approval any more." if asked.isdigit() else ""
            raise DomainError(gone or "Nothing is waiting for approval.")
    except Forbidden as error:
        raise PermissionDenied(error.message) from None
    except DomainError as error:
        messages.error(request, error.message)
        return redirect("deployment-detail", pk=dep.pk)
    return render(request, "deployments/deployment_confirm.html", confirm_context(dep, action, rev))


@login_required
def deployment_revisions(request, pk: int):
    """Every revision: who proposed and decided it, when and why, what it changed."""
    dep = _visible(request, pk)
    context = {"dep": dep, "rows": history_rows(request, dep)}
    return render(request, "deployments/deployment_revisions.html", context)


@login_required
def deployment_revision_diff(request, pk: int):
    """The field-by-field diff between any two revisions (?from=a&to=b); bad input is a form error."""
    dep = _visible(request, pk)
    revisions = {r.number: r for r in dep.revisions.select_related("proposed_by", "decided_by")}
    numbers = sorted(revisions, reverse=True)
    asked = "from" in request.GET or "to" in request.GET
    form = RevisionDiffForm(request.GET if asked else None, numbers=numbers, initial=default_pair(dep, numbers))
    if asked:
        pair = (form.cleaned_data["from"], form.cleaned_data["to"]) if form.is_valid() else None
    else:
        pair = (form.initial["from"], form.initial["to"]) if numbers else None
    context = {"dep": dep, "form": form, "pair": pair, "revisions": revisions}
    if pair:
        context |= {"rows": revision_pair_diff(dep, *pair), "a": revisions[pair[0]], "b": revisions[pair[1]]}
    return render(request, "deployments/revision_diff.html", context, status=400 if asked and not pair else 200)


def allowed_actions(user, dep: ModelDeployment) -> list[str]:
    """The lifecycle buttons this user sees: the permission table's cells for their role and the
    deployment's state (scale and update have their own forms; revision actions sit beside the
    revision, in the proposed change and the history)."""
    actor = actor_of(dep.tenant, user)
    return [a.value for a in actions_for(actor, dep.state) if a not in (Action.SCALE, Action.UPDATE, *READ_ACTIONS)]
