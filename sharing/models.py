"""A deployment published to other tenants, and each consuming tenant's subscription to it.

A publication names its audience (every tenant, or a list), whether a subscription is approved by
policy at once or waits for the owner, and the per-consumer limits a new subscription starts with.
A subscription's own limits are what the gateways enforce for that consumer (None: no limit).
Rows are never deleted by the people using them: unpublishing and cancelling end subscriptions, so
the usage counted while one was active still has the row that allowed it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from quotas.models import TenantOwnedQuerySet

MAX_LIMIT = 1_000_000_000  # per minute; a Kuadrant limit's `limit` is an int


class SubscriptionState(models.TextChoices):
    REQUESTED = "requested", "Waiting for the owner"
    ACTIVE = "active", "Active"
    REFUSED = "refused", "Refused"
    ENDED = "ended", "Ended"


class PublicationQuerySet(TenantOwnedQuerySet):
    tenant_field = "deployment__tenant"

    def published(self):
        return self.filter(active=True)

    def offered_to(self, tenant):
        """What `tenant` may subscribe to now: published, to it or to all, not its own."""
        return self.published().filter(Q(to_all=True) | Q(tenants=tenant)).exclude(deployment__tenant=tenant).distinct()


class Publication(models.Model):
    deployment = models.OneToOneField(
        "deployments.ModelDeployment", on_delete=models.CASCADE, related_name="publication"
    )
    active = models.BooleanField(default=True)  # False: unpublished (its subscriptions ended)
    to_all = models.BooleanField(default=False)
    tenants = models.ManyToManyField("quotas.Tenant", blank=True, related_name="+")
    auto_approve = models.BooleanField(default=False)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = PublicationQuerySet.as_manager()

    def __str__(self) -> str:
        return f"publication of deployment {self.deployment_id}"


class SubscriptionQuerySet(TenantOwnedQuerySet):
    tenant_field = "consumer"

    def visible_to(self, user):
        """Subscriptions of the user's tenants, as consumer or as owner."""
        from quotas.models import is_platform_admin

        if is_platform_admin(user):
            return self.all()
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(
            Q(consumer__memberships__user=user) | Q(publication__deployment__tenant__memberships__user=user)
        ).distinct()

    def active(self):
        return self.filter(state=SubscriptionState.ACTIVE, publication__active=True)


class Subscription(models.Model):
    publication = models.ForeignKey(Publication, on_delete=models.CASCADE, related_name="subscriptions")
    consumer = models.ForeignKey("quotas.Tenant", on_delete=models.CASCADE, related_name="subscriptions")
    state = models.CharField(max_length=12, choices=SubscriptionState.choices, default=SubscriptionState.REQUESTED)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = SubscriptionQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["publication", "consumer"], name="one_subscription_per_consumer"),
        ]

    def __str__(self) -> str:
        return f"{self.consumer_id} → deployment {self.publication.deployment_id} ({self.state})"
