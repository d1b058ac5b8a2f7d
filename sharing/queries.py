"""What a user sees of shared models: publications of their tenants' deployments and those offered
to their tenants; subscriptions on either side. The API and the pages read these."""

from __future__ import annotations

from django.db.models import Q

from quotas.models import Tenant, is_platform_admin
from sharing.models import Publication, Subscription


def visible_publications(user):
    if is_platform_admin(user):
        return Publication.objects.all()
    tenants = Tenant.objects.visible_to(user)
    offered = Q(active=True) & (Q(to_all=True) | Q(tenants__in=tenants))
    return Publication.objects.filter(Q(deployment__tenant__in=tenants) | offered).distinct()


def visible_subscriptions(user):
    return Subscription.objects.visible_to(user)
