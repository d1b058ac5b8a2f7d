"""Telling a tenant's admins something by e-mail: budget warnings (usage.budgets), idle warnings
and stops (reclaim), temporary quota that cannot be reverted yet (quotas.temporary).

The one place that decides who hears about a tenant: its tenant admins with an e-mail address,
or, when it has none, the platform admins. Sent through Django's mail backend (the console in
the demo); a failure to send is logged and never undoes the change that caused the message.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db.models import Q

from quotas.choices import Role
from quotas.models import PLATFORM_ADMIN_GROUP, Tenant

log = logging.getLogger(__name__)


def tenant_admin_emails(tenant: Tenant) -> list[str]:
    """Addresses of the tenant's admins; the platform admins' when the tenant has none."""
    users = get_user_model().objects.filter(is_active=True).exclude(email="")
    admins = users.filter(memberships__tenant=tenant, memberships__role=Role.TENANT_ADMIN)
    emails = sorted(set(admins.values_list("email", flat=True)))
    if not emails:
        platform = users.filter(Q(is_staff=True) | Q(is_superuser=True) | Q(groups__name=PLATFORM_ADMIN_GROUP))
        emails = sorted(set(platform.values_list("email", flat=True)))
    return emails


def notify_tenant_admins(tenant: Tenant, *, subject: str, body: str) -> int:
    """E-mail the tenant's admins; returns how many messages went out (0 when nobody has an
    address or the backend failed)."""
    recipients = tenant_admin_emails(tenant)
    if not recipients:
        return 0
    try:
        return send_mail(
            f"[{settings.PORTAL_NAME}] {tenant.display_name}: {subject}",
            body,
            None,  # DEFAULT_FROM_EMAIL
            recipients,
        )
    except Exception:  # noqa: BLE001 - any backend error: the change stands, the log says why
        log.exception("Could not e-mail the admins of tenant %s", tenant.slug)
        return 0
