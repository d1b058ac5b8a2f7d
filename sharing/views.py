"""The shared-models page: share a deployment, decide on subscriptions, subscribe to what other
tenants offer. Thin callers of sharing.services, as the API is; every button is derived from
sharing.permissions, and the services check again."""

from __future__ import annotations

import re

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.exceptions import DomainError
from quotas.actors import actor_of
from quotas.models import Tenant
from sharing import services
from sharing.forms import LimitsForm, PublishForm, publishable
from sharing.permissions import PUBLISHED, UNPUBLISHED, ShareAction, Side, actions_for, allowed
from sharing.queries import visible_publications, visible_subscriptions

SLUG = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DECISIONS = {
    ShareAction.APPROVE: services.approve,
    ShareAction.REFUSE: services.refuse,
    ShareAction.CANCEL: services.cancel,
    ShareAction.END: services.end,
}


def _context(request, form: PublishForm | None = None) -> dict:
    user = request.user
    tenants = list(Tenant.objects.visible_to(user).order_by("slug"))
    publications = list(
        visible_publications(user).select_related("deployment__tenant").prefetch_related("tenants").order_by("-created")
    )
    subscriptions = list(
        visible_subscriptions(user).select_related("consumer", "publication__deployment__tenant").order_by("-created")
    )
    own = [p for p in publications if p.deployment.tenant in tenants]
    for publication in own:
        state = PUBLISHED if publication.active else UNPUBLISHED
        publication.can_unpublish = allowed(actor_of(publication.deployment.tenant, user), ShareAction.UNPUBLISH, state)
        publication.rows = [s for s in subscriptions if s.publication_id == publication.pk]
        for sub in publication.rows:
            sub.owner_actions = actions_for(actor_of(publication.deployment.tenant, user), Side.OWNER, sub.state)
    mine = {}
    for sub in subscriptions:
        if sub.consumer in tenants:
            sub.consumer_actions = actions_for(actor_of(sub.consumer, user), Side.CONSUMER, sub.state)
            mine[(sub.publication_id, sub.consumer_id)] = sub
    offers = []
    for publication in publications:
        if not publication.active:
            continue
        audience = {t.pk for t in publication.tenants.all()}
        for tenant in tenants:
            if tenant.pk == publication.deployment.tenant_id or not (publication.to_all or tenant.pk in audience):
                continue
            sub = mine.get((publication.pk, tenant.pk))
            can = allowed(actor_of(tenant, user), ShareAction.SUBSCRIBE, sub.state if sub else None)
            offers.append({"publication": publication, "tenant": tenant, "subscription": sub, "can_subscribe": can})
    return {
        "form": form if form is not None else PublishForm(user=user),
        "can_publish": publishable(user).exists(),
        "own": own,
        "offers": offers,
        "subscriptions": [s for s in mine.values()],
        "limits_form": LimitsForm(),
    }


@login_required
def shared_models(request):
    return render(request, "sharing/shared_models.html", _context(request))


@login_required
@require_POST
def publish_view(request):
    form = PublishForm(request.POST, user=request.user)
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.publish(
                user=request.user,
                deployment_id=data["deployment"].pk,
                to_all=data["to_all"],
                tenants=[t.slug for t in data["tenants"]],
                auto_approve=data["auto_approve"],
                tokens_per_minute=data["tokens_per_minute"],
                requests_per_minute=data["requests_per_minute"],
            )
        except DomainError as error:
            form.add_error(error.field if error.field in form.fields else None, error.message)
        else:
            messages.success(request, f"{data['deployment'].name} is shared.")
            return redirect("shared-models")
    return render(request, "sharing/shared_models.html", _context(request, form), status=400)


@login_required
@require_POST
def unpublish_view(request, pk: int):
    publication = get_object_or_404(visible_publications(request.user), pk=pk)
    return _done(
        request,
        lambda: services.unpublish(user=request.user, deployment_id=publication.deployment_id),
        "No longer shared.",
    )


@login_required
@require_POST
def subscribe_view(request):
    slug = str(request.POST.get("tenant", ""))
    tenant = Tenant.objects.visible_to(request.user).filter(slug=slug).first() if SLUG.fullmatch(slug) else None
    try:
        deployment_id = int(request.POST.get("deployment", ""))
    except ValueError:
        deployment_id = 0
    if tenant is None or deployment_id <= 0:
        messages.error(request, "Choose a tenant of yours and a shared model.")
        return redirect("shared-models")
    return _done(
        request,
        lambda: services.subscribe(user=request.user, consumer=tenant, deployment_id=deployment_id),
        "Subscribed.",
    )


@login_required
@require_POST
def decide_view(request, pk: int, verb: str):
    subscription = get_object_or_404(visible_subscriptions(request.user), pk=pk)
    if verb == ShareAction.SET_LIMITS.value:
        form = LimitsForm(request.POST)
        if not form.is_valid():
            messages.error(request, " ".join(f"{form.fields[f].label}: {' '.join(e)}" for f, e in form.errors.items()))
            return redirect("shared-models")
        call = lambda: services.set_limits(user=request.user, subscription_id=subscription.pk, **form.cleaned_data)  # noqa: E731
    else:
        try:
            service = DECISIONS[ShareAction(verb)]
        except (ValueError, KeyError):
            return redirect("shared-models")
        call = lambda: service(user=request.user, subscription_id=subscription.pk)  # noqa: E731
    return _done(request, call, "Saved.")


def _done(request, call, success: str):
    try:
        call()
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, success)
    return redirect("shared-models")
