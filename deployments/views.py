"""Browser views for deployments. Each is a thin caller of the same services as the API."""

from __future__ import annotations

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.exceptions import DomainError
from core.redirects import safe_next
from deployments import services
from deployments.choices import Backend, ServingProfile, State
from deployments.filtersets import DeploymentFilterSet
from deployments.forms import DeploymentEditForm, DeploymentForm, ReasonForm, ScaleForm, TryForm, form_error_text
from deployments.models import ModelDeployment
from deployments.panels import extra_list_context
from deployments.presenters import detail_context
from deployments.states import READ_ACTIONS, Action, actions_for, actor_of


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
                    if dep.state == State.APPROVED
                    else "waiting for a platform admin's approval."
                ),
            )
            return redirect("deployment-detail", pk=dep.pk)
    return render(request, "deployments/deployment_form.html", {"form": form, "backends": Backend})


def _show_applied(request, form: DeploymentForm, dep: ModelDeployment | None = None):
    """The form again with the chosen serving profile's values filled in (no script needed)."""
    form = form.applied()
    if form.preset is None:
        messages.info(request, "Choose the hardware and a serving profile, then apply it.")
    else:
        label = ServingProfile(form.preset.profile).label
        messages.info(request, f"Applied the {label} profile: check the values (each is yours to edit), then submit.")
    return render(request, "deployments/deployment_form.html", {"form": form, "backends": Backend, "dep": dep})


def _draft_form(request) -> DeploymentForm:
    """The request form (or, with ?deployment=<id>, the edit form) bound to the POSTed draft."""
    editing = request.GET.get("deployment", "")
    if editing.isdigit():
        return DeploymentEditForm(request.POST, deployment=_visible(request, int(editing)), user=request.user)
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
    """htmx: quota fit and memory fit for the form as typed so far (creates nothing)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    form = _draft_form(request)
    form.is_valid()
    return render(request, "deployments/_preview.html", {"form": form, "check": form.check})


@login_required
def deployment_detail(request, pk: int):
    dep = _visible(request, pk)
    return render(request, "deployments/deployment_detail.html", detail_context(request, dep))


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


@login_required
def deployment_edit(request, pk: int):
    """Change a deployment's spec: the API's PATCH deployments/<id>/, as a form. A change to what
    runs goes back to approval unless the tenant's policy covers it; the approved version keeps
    serving meanwhile (the service decides, as for the API)."""
    dep = _visible(request, pk)
    if Action.UPDATE not in actions_for(actor_of(dep.tenant, request.user), dep.state):
        raise PermissionDenied("Only members of the tenant may change a deployment, and not in this state.")
    form = DeploymentEditForm(request.POST or None, deployment=dep, user=request.user)
    if request.method == "POST" and form.wants_profile_applied():
        return _show_applied(request, form, dep=dep)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data, quantization=form.cleaned_data.get("quantization") or "")
        data["served_model_name"] = data.get("served_model_name") or dep.name
        try:
            updated = services.deployment_update(deployment_id=dep.pk, user=request.user, data=data)
        except services.DraftInvalid as error:
            for field, message in error.errors.items():
                form.add_error(field if field in form.fields else None, message)
        except DomainError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        else:
            if updated.generation == dep.generation:
                messages.info(request, "Nothing changed.")
            elif updated.state == State.PENDING_APPROVAL:
                messages.success(
                    request,
                    f"Saved as generation {updated.generation}: it waits for a platform admin's approval; "
                    "the approved version keeps serving.",
                )
            else:
                messages.success(request, f"Saved as generation {updated.generation}.")
            return redirect("deployment-detail", pk=dep.pk)
    return render(request, "deployments/deployment_form.html", {"form": form, "dep": dep})


def _approve(dep, user, form):
    if form.get("generation") is None:
        raise DomainError("Reload the page and review the request again before approving.")
    return services.deployment_approve(
        deployment_id=dep.pk, approver=user, generation=form["generation"], reason=form.get("reason", "")
    )


ACTIONS = {
    "approve": (_approve, "Approved."),
    "reject": (
        lambda dep, user, form: services.deployment_reject(
            deployment_id=dep.pk, approver=user, reason=form.get("reason", "")
        ),
        "Rejected.",
    ),
    "cancel": (lambda dep, user, form: services.deployment_cancel(deployment_id=dep.pk, user=user), "Cancelled."),
    "stop": (lambda dep, user, form: services.deployment_stop(deployment_id=dep.pk, user=user), "Stopping."),
    "start": (lambda dep, user, form: services.deployment_start(deployment_id=dep.pk, user=user), "Starting."),
    "delete": (lambda dep, user, form: services.deployment_delete(deployment_id=dep.pk, user=user), "Deleting."),
}


@login_required
@require_POST
def deployment_action(request, pk: int, action: str):
    """One POST endpoint per lifecycle action; errors come back as a message on the page."""
    dep = _visible(request, pk)
    if action == "scale":
        form = ScaleForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Scale: " + form_error_text(form))
            return redirect(safe_next(request, "deployment-detail", pk=pk))
        call, done = (
            lambda d, u, f: services.deployment_scale(deployment_id=d.pk, user=u, **form.cleaned_data),
            "Scaled.",
        )
    elif action in ACTIONS:
        call, done = ACTIONS[action]
    else:
        raise Http404("unknown action")
    reason = ReasonForm(request.POST)
    reason.is_valid()
    try:
        result = call(dep, request.user, reason.cleaned_data)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        if action == "scale" and result.state == State.PENDING_APPROVAL:
            done = "Scaled: more GPUs need a platform admin's approval; the approved version keeps serving."
        messages.success(request, done)
    return redirect(safe_next(request, "deployment-detail", pk=pk))


def allowed_actions(user, dep: ModelDeployment) -> list[str]:
    """The lifecycle buttons this user sees: the permission table's cells for their role and the
    deployment's state (scale and update have their own forms)."""
    actor = actor_of(dep.tenant, user)
    return [a.value for a in actions_for(actor, dep.state) if a not in (Action.SCALE, Action.UPDATE, *READ_ACTIONS)]
