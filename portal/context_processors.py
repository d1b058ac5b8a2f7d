"""Navigation context: the user's tenants, role flags and pending-approval counts."""

from __future__ import annotations


def navigation(request):
    from django.conf import settings

    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"oidc_enabled": settings.OIDC_ENABLED}
    from quotas.models import Tenant, is_platform_admin

    admin = is_platform_admin(user)
    from quotas.choices import Role

    tenants = list(Tenant.objects.visible_to(user))
    context = {
        "nav_tenants": tenants,
        "is_platform_admin": admin,
        # Viewers cannot request deployments: no point showing them the form.
        "nav_can_request": any(t.has_role(user, Role.MEMBER) for t in tenants),
    }
    if admin:
        from portal.inbox import pending_counts

        context["nav_pending"] = pending_counts()
    return context
