"""Publishing a deployment to other tenants and subscribing to it; every action is checked
against sharing.permissions and recorded in the audit log, under row locks, so two admins acting
at once leave one outcome. The local gateway hears of every change after the commit (sharing.local).

A shared model keeps its owner's served name on the consumer's endpoint, so a tenant cannot
subscribe to a name it already serves or already has from another subscription (the consumer's own
deployment would win the route: runtime.gateway_local.routes.Table.models).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.exceptions import DomainError
from core.models import audit
from deployments.models import ModelDeployment
from deployments.states import DELETED_OR_DELETING, FINAL, RUNNING
from quotas.actors import actor_of
from quotas.models import Tenant
from sharing.models import MAX_LIMIT, Publication, Subscription, SubscriptionState
from sharing.permissions import OPEN, PUBLISHED, UNPUBLISHED, ShareAction, authorize

LIMIT_FIELDS = ("tokens_per_minute", "requests_per_minute")


def _limit(value, field: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise DomainError(f"A whole number from 1 to {MAX_LIMIT}, or empty for no limit.", field=field)
    return value


def _deployment(deployment_id) -> ModelDeployment:
    found = ModelDeployment.objects.select_for_update().select_related("tenant").filter(pk=deployment_id).first()
    if found is None:
        raise DomainError("No such deployment.", field="deployment")
    return found


def _after_commit() -> None:
    from sharing.local import sync_local_gateway

    transaction.on_commit(sync_local_gateway)


def _served_name(dep: ModelDeployment) -> str:
    return dep.served_model_name or dep.name


@transaction.atomic
def publish(
    *,
    user,
    deployment_id: int,
    to_all: bool = False,
    tenants: list[str] | None = None,
    auto_approve: bool = False,
    tokens_per_minute: int | None = None,
    requests_per_minute: int | None = None,
) -> Publication:
    """Publish the deployment (or change an existing publication). Consumers left out of a narrowed
    audience have their subscriptions ended."""
    dep = _deployment(deployment_id)
    existing = Publication.objects.select_for_update().filter(deployment=dep).first()
    authorize(
        actor_of(dep.tenant, user), ShareAction.PUBLISH, PUBLISHED if existing and existing.active else UNPUBLISHED
    )
    if dep.state in FINAL | DELETED_OR_DELETING:
        raise DomainError("A deployment that is deleted or will never run cannot be shared.", field="deployment")
    limits = {
        field: _limit(value, field)
        for field, value in zip(LIMIT_FIELDS, (tokens_per_minute, requests_per_minute), strict=True)
    }
    slugs = sorted(set(tenants or []))
    audience = list(Tenant.objects.filter(slug__in=slugs, archived_at__isnull=True).exclude(pk=dep.tenant_id))
    unknown = sorted(set(slugs) - {t.slug for t in audience})
    if unknown:
        raise DomainError(f"No other active tenant named {', '.join(unknown)[:300]}.", field="tenants")
    if not to_all and not audience:
        raise DomainError("Name at least one tenant, or share with all.", field="tenants")
    publication = existing or Publication(deployment=dep, created_by=user)
    publication.active, publication.to_all, publication.auto_approve = True, bool(to_all), bool(auto_approve)
    publication.tokens_per_minute, publication.requests_per_minute = (
        limits["tokens_per_minute"],
        limits["requests_per_minute"],
    )
    publication.save()
    publication.tenants.set([] if to_all else audience)
    ended = []
    if not to_all:
        left_out = publication.subscriptions.select_for_update().filter(state__in=OPEN).exclude(consumer__in=audience)
        ended = list(left_out.values_list("consumer__slug", flat=True))
        left_out.update(state=SubscriptionState.ENDED, decided_by=user, decided_at=timezone.now())
    audit(
        actor=user,
        action="sharing.publish",
        obj=publication,
        tenant=dep.tenant,
        changes={
            "deployment": dep.pk,
            "to_all": publication.to_all,
            "tenants": [t.slug for t in audience] if not to_all else [],
            "auto_approve": publication.auto_approve,
            **limits,
            "ended": ended,
        },
    )
    _after_commit()
    return publication


@transaction.atomic
def unpublish(*, user, deployment_id: int) -> Publication:
    """Stop sharing: every open subscription ends at once."""
    dep = _deployment(deployment_id)
    publication = Publication.objects.select_for_update().filter(deployment=dep).first()
    authorize(
        actor_of(dep.tenant, user),
        ShareAction.UNPUBLISH,
        PUBLISHED if publication and publication.active else UNPUBLISHED,
    )
    publication.active = False
    publication.save(update_fields=["active", "updated"])
    ended = publication.subscriptions.select_for_update().filter(state__in=OPEN)
    consumers = list(ended.values_list("consumer__slug", flat=True))
    ended.update(state=SubscriptionState.ENDED, decided_by=user, decided_at=timezone.now())
    audit(actor=user, action="sharing.unpublish", obj=publication, tenant=dep.tenant, changes={"ended": consumers})
    _after_commit()
    return publication


def _serves(name: str, prefix: str = "") -> Q:
    """Rows whose deployment (at `prefix`) serves `name`: its served name, or its name when that is empty."""
    return Q(**{f"{prefix}served_model_name": name}) | Q(**{f"{prefix}served_model_name": "", f"{prefix}name": name})


def _name_taken(consumer: Tenant, publication: Publication) -> str | None:
    """Why `consumer` cannot have this model under its name, or None."""
    name = _served_name(publication.deployment)
    own = ModelDeployment.objects.filter(tenant=consumer).exclude(state__in=DELETED_OR_DELETING)
    if own.filter(_serves(name)).exists():
        return f"Your tenant serves a model named {name} already."
    others = Subscription.objects.filter(consumer=consumer, state__in=OPEN, publication__active=True).exclude(
        publication=publication
    )
    if others.filter(_serves(name, "publication__deployment__")).exists():
        return f"Your tenant has a shared model named {name} already."
    return None


@transaction.atomic
def subscribe(*, user, consumer: Tenant, deployment_id: int) -> Subscription:
    """Ask for the shared model on `consumer`'s endpoint: active at once when the publication's
    policy approves, else waiting for the owner. 400 on `deployment` when it is not offered."""
    consumer = Tenant.objects.select_for_update(no_key=True).get(pk=consumer.pk)
    offered = Publication.objects.offered_to(consumer).filter(deployment_id=deployment_id).values_list("pk", flat=True)
    publication = (
        Publication.objects.select_for_update(of=("self",))
        .select_related("deployment__tenant")
        .filter(pk__in=list(offered), active=True)
        .first()
    )
    if publication is not None and not Publication.objects.offered_to(consumer).filter(pk=publication.pk).exists():
        publication = None  # narrowed by a publish that held the lock before this one
    if publication is None:
        raise DomainError("No model shared with your tenant has that deployment.", field="deployment")
    subscription = Subscription.objects.select_for_update().filter(publication=publication, consumer=consumer).first()
    authorize(actor_of(consumer, user), ShareAction.SUBSCRIBE, subscription.state if subscription else None)
    if consumer.archived:
        raise DomainError("The tenant is archived.", field="tenant")
    taken = _name_taken(consumer, publication)
    if taken:
        raise DomainError(taken, field="deployment")
    subscription = subscription or Subscription(publication=publication, consumer=consumer)
    subscription.requested_by = user
    subscription.tokens_per_minute = publication.tokens_per_minute
    subscription.requests_per_minute = publication.requests_per_minute
    if publication.auto_approve:
        subscription.state, subscription.decided_by, subscription.decided_at = (
            SubscriptionState.ACTIVE,
            None,
            timezone.now(),
        )
    else:
        subscription.state, subscription.decided_by, subscription.decided_at = SubscriptionState.REQUESTED, None, None
    subscription.save()
    audit(
        actor=user,
        action="sharing.subscribe",
        obj=subscription,
        tenant=consumer,
        changes={"deployment": publication.deployment_id, "state": subscription.state},
    )
    if publication.auto_approve:
        audit(actor="policy", action="sharing.approve", obj=subscription, tenant=publication.deployment.tenant)
    _after_commit()
    return subscription


def _locked(subscription_id: int) -> Subscription:
    found = (
        Subscription.objects.select_for_update(of=("self",))
        .select_related("consumer", "publication__deployment__tenant")
        .filter(pk=subscription_id)
        .first()
    )
    if found is None:
        raise DomainError("No such subscription.", field="subscription")
    return found


def _decide(user, subscription_id: int, action: ShareAction, state: str | None, limits: dict | None = None):
    """Apply `action` to the locked subscription: to `state` (None: the state stays), limits set."""
    subscription = _locked(subscription_id)
    state = state or subscription.state
    owner = subscription.publication.deployment.tenant
    if action == ShareAction.CANCEL:
        authorize(actor_of(subscription.consumer, user), action, subscription.state)
    else:
        authorize(actor_of(owner, user), action, subscription.state)
    if action == ShareAction.APPROVE and not subscription.publication.active:
        raise DomainError("The model is no longer shared.", field="subscription")
    changes = {"from": subscription.state, "to": state}
    for field, value in (limits or {}).items():
        setattr(subscription, field, _limit(value, field))
        changes[field] = getattr(subscription, field)
    subscription.state = state
    if action != ShareAction.SET_LIMITS:
        subscription.decided_by, subscription.decided_at = user, timezone.now()
    subscription.save()
    audit(actor=user, action=f"sharing.{action.value}", obj=subscription, tenant=owner, changes=changes)
    _after_commit()
    return subscription


def _limits(kwargs: dict) -> dict:
    return {field: kwargs[field] for field in LIMIT_FIELDS if field in kwargs}


@transaction.atomic
def approve(*, user, subscription_id: int, **limits) -> Subscription:
    return _decide(user, subscription_id, ShareAction.APPROVE, SubscriptionState.ACTIVE, _limits(limits))


@transaction.atomic
def refuse(*, user, subscription_id: int) -> Subscription:
    return _decide(user, subscription_id, ShareAction.REFUSE, SubscriptionState.REFUSED)


@transaction.atomic
def set_limits(*, user, subscription_id: int, **limits) -> Subscription:
    return _decide(user, subscription_id, ShareAction.SET_LIMITS, None, _limits(limits))


@transaction.atomic
def cancel(*, user, subscription_id: int) -> Subscription:
    return _decide(user, subscription_id, ShareAction.CANCEL, SubscriptionState.ENDED)


@transaction.atomic
def end(*, user, subscription_id: int) -> Subscription:
    return _decide(user, subscription_id, ShareAction.END, SubscriptionState.ENDED)


def shared_with(tenant: Tenant):
    """The deployments `tenant` reaches through active subscriptions (running or not)."""
    return ModelDeployment.objects.filter(
        publication__active=True,
        publication__subscriptions__consumer=tenant,
        publication__subscriptions__state=SubscriptionState.ACTIVE,
    ).exclude(state__in=DELETED_OR_DELETING)


def running_shared_with(tenant: Tenant):
    return shared_with(tenant).filter(state__in=RUNNING)
