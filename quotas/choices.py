from django.db import models


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    MEMBER = "member", "Member"
    TENANT_ADMIN = "tenant_admin", "Tenant admin"


class MembershipSource(models.TextChoices):
    MANUAL = "manual", "Added in the portal"
    IDP = "idp", "Identity-provider group"
    SCIM = "scim", "Identity-provider provisioning (SCIM)"


# Higher rank includes the lower ones.
ROLE_RANK = {Role.VIEWER: 1, Role.MEMBER: 2, Role.TENANT_ADMIN: 3}


class QuotaChangeStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"


class Fit(models.TextChoices):
    NOMINAL = "nominal", "Fits within nominal quota"
    BORROWING = "borrowing", "Fits by borrowing (may be preempted)"
    NO_FIT = "no_fit", "Does not fit"
