"""Tenants, memberships, GPU flavors, quotas, quota-change requests and reservations."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q, QuerySet
from django.db.models.functions import Now

from quotas.choices import ROLE_RANK, MembershipSource, QuotaChangeStatus, Role
from quotas.help_texts import REQUESTS_PER_MINUTE_HELP, TOKENS_PER_MINUTE_HELP, WAKE_TIMEOUT_HELP
from quotas.validators import (
    TENANT_SLUG_MAX,
    validate_dns1123_label,
    validate_flavor_name,
    validate_label_value,
    validate_node_labels,
    validate_storage_class,
    validate_tenant_slug,
    validate_tolerations,
)
from runtime.accelerators import accelerator_type_problem

PLATFORM_ADMIN_GROUP = "platform-admins"


def is_platform_admin(user) -> bool:
    """Platform admins are staff users or members of the `platform-admins` group (the same rule
    as a query: platform_admins_q)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return False
    if user.is_staff or user.is_superuser:
        return True
    cached = getattr(user, "_is_platform_admin", None)
    if cached is None:
        cached = user.groups.filter(name=PLATFORM_ADMIN_GROUP).exists()
        user._is_platform_admin = cached
    return cached


def platform_admins_q() -> Q:
    """`is_platform_admin` as a filter on users: the same rule, for queries over many users at
    once (the keys sweep)."""
    return Q(is_active=True) & (Q(is_staff=True) | Q(is_superuser=True) | Q(groups__name=PLATFORM_ADMIN_GROUP))


class TenantQuerySet(QuerySet):
    def visible_to(self, user) -> TenantQuerySet:
        """Tenants the user belongs to; every tenant for platform admins."""
        if is_platform_admin(user):
            return self.all()
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(memberships__user=user).distinct()


class TenantOwnedQuerySet(QuerySet):
    """The one place tenant isolation lives for tenant-owned rows (UI lists and API alike)."""

    tenant_field = "tenant"

    def visible_to(self, user):
        if is_platform_admin(user):
            return self.all()
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(**{f"{self.tenant_field}__memberships__user": user})


class Tenant(models.Model):
    """A team. Its slug is its Kubernetes namespace and its Kueue LocalQueue name.

    The slug is fixed at creation and never given to another tenant: it names things outside
    the database (the Namespace and queues, the key files of the local engines, the tenant label
    on API-key Secrets that the AuthPolicies select, the routes, identity-provider groups), so a
    renamed or reused slug would hand what was published under it to another team. quotas.tenants
    refuses a change with a field message, and a slug in RetiredTenantSlug; the database refuses
    a rename that bypasses it, records the slug of a deleted row there and refuses a new row with
    a retired slug (migration 0005). The portal archives tenants; it deletes none.
    """

    slug = models.CharField(
        max_length=TENANT_SLUG_MAX,
        unique=True,
        validators=[validate_tenant_slug],
        help_text="Kubernetes namespace and Kueue LocalQueue name (DNS-1123 label); fixed once the tenant exists.",
    )
    display_name = models.CharField(max_length=100)
    cohort = models.CharField(
        max_length=63,
        blank=True,
        validators=[validate_dns1123_label],
        help_text="Kueue cohort for this tenant's ClusterQueue (empty: the platform default).",
    )
    auto_approve_max_gpus = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(100_000)],
        help_text="Deployments needing at most this many GPUs, within nominal quota, are "
        "approved automatically (0 disables auto-approval).",
    )
    # --- policy (quotas.policy reads these; deployments' request validation enforces them) ---
    allowed_flavors = models.ManyToManyField(
        "GpuFlavor",
        blank=True,
        related_name="allowed_tenants",
        help_text="GPU flavors this tenant may request (none selected: every active flavor).",
    )
    # The model allow-list (issue 33): catalog rows and/or source patterns (catalog.patterns); both
    # empty: any model. quotas.policy.model_error reads them.
    allowed_models = models.ManyToManyField(
        "catalog.CatalogModel",
        blank=True,
        related_name="allowed_tenants",
        help_text="Catalog models this tenant may deploy, at their pinned revision (none and no patterns: any).",
    )
    allowed_source_patterns = models.JSONField(
        default=list,
        blank=True,
        help_text="Model source globs this tenant may deploy, e.g. meta-llama/* or s3://team-bucket/*.",
    )
    # Priority tiers (issue 35, quotas.tier_models): which the tenant may choose, and which of those
    # its policy may approve without a person. None allowed: its deployments have no tier.
    allowed_tiers = models.ManyToManyField(
        "PriorityTier",
        blank=True,
        related_name="allowed_tenants",
        help_text="Priority tiers this tenant's deployments may use (none: no tier, Kueue's default priority).",
    )
    auto_approve_tiers = models.ManyToManyField(
        "PriorityTier",
        blank=True,
        related_name="auto_approving_tenants",
        help_text="Allowed tiers whose deployments the policy may approve (others always wait for a person).",
    )
    max_gpus_per_deployment = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(100_000)],
        help_text="Most GPUs one deployment may reserve (max replicas × TP × PP); 0: no limit.",
    )
    # --- usage and idle policy (issue 20: usage.budgets, reclaim) -------------------------------
    monthly_budget = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Spend per calendar month, in the currency of the flavors' GPU-hour prices (empty: no budget).",
    )
    budget_hard_stop = models.BooleanField(
        default=False,
        help_text="At 100 % of the monthly budget, stop the tenant's deployments and refuse new starts.",
    )
    budget_stopped_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Set by the budget sweep when the hard stop took effect; cleared when the budget allows again.",
    )
    idle_warn_hours = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(24 * 90)],
        help_text="Warn after this many hours without generated tokens (0: no warning).",
    )
    idle_stop_hours = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(24 * 90)],
        help_text="Stop a deployment and release its GPUs after this many hours without generated tokens (0: never).",
    )
    serving_schedule = models.CharField(
        max_length=200,
        blank=True,
        help_text="When deployments may run, e.g. 'mon-fri 08:00-20:00' (empty: always).",
    )
    wake_timeout_seconds = models.PositiveIntegerField(
        default=120,
        validators=[MaxValueValidator(900)],
        help_text=WAKE_TIMEOUT_HELP,
    )
    # --- endpoint access (issue 21: access) --------------------------------------------------
    tokens_per_minute = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(10**9)],
        help_text=TOKENS_PER_MINUTE_HELP,
    )
    requests_per_minute = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(10**7)],
        help_text=REQUESTS_PER_MINUTE_HELP,
    )
    # --- storage (issue 40: quotas.model_cache) ----------------------------------------------
    model_cache_size_gi = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(2**20)],
        help_text="Size of the tenant's model-cache claim in GiB (empty: MODEL_CACHE_SIZE_GI). Only ever grown.",
    )
    model_cache_storage_class = models.CharField(
        max_length=253,
        blank=True,
        validators=[validate_storage_class],
        help_text="StorageClass of the model-cache claim (empty: MODEL_CACHE_STORAGE_CLASS); fixed once created.",
    )
    model_cache_status = models.JSONField(
        default=dict, blank=True, help_text="What the last sync found or did with the model-cache claim."
    )
    namespace_created = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the Kueue sync first applied the tenant's Namespace.",
    )
    archived_at = models.DateTimeField(
        null=True, blank=True, help_text="Archived tenants run nothing, hold no quota and take no requests."
    )
    kueue_status = models.JSONField(
        default=dict, blank=True, help_text="Last ClusterQueue status read back from Kueue."
    )
    created = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.display_name

    @property
    def namespace(self) -> str:
        return self.slug

    @property
    def archived(self) -> bool:
        return self.archived_at is not None

    @property
    def local_queue(self) -> str:
        return self.slug

    @property
    def cluster_queue(self) -> str:
        return f"tenant-{self.slug}"

    @property
    def effective_cohort(self) -> str:
        return self.cohort or settings.KUEUE_COHORT

    def role_of(self, user) -> str | None:
        """The user's role in this tenant (None when not a member)."""
        if not getattr(user, "is_authenticated", False):
            return None
        cache = getattr(user, "_tenant_roles", None)
        if cache is None:
            cache = dict(Membership.objects.filter(user=user).values_list("tenant_id", "role"))
            user._tenant_roles = cache
        return cache.get(self.pk)

    def has_role(self, user, role: str) -> bool:
        """True when the user holds `role` or a higher one here, or is a platform admin."""
        if is_platform_admin(user):
            return True
        held = self.role_of(user)
        return held is not None and ROLE_RANK[held] >= ROLE_RANK[role]


class RetiredTenantSlug(models.Model):
    """The slug of a tenant row that was deleted (written by the database's trigger, migration
    0005): what was published under it may remain, so no new tenant may take it."""

    slug = models.CharField(max_length=TENANT_SLUG_MAX, primary_key=True)
    retired_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A user's role in a tenant."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)
    source = models.CharField(
        max_length=10,
        choices=MembershipSource.choices,
        default=MembershipSource.MANUAL,
        help_text=(
            "Who manages it: an admin in the portal, or the identity provider (its groups at each sign-in, "
            "or its SCIM provisioning)."
        ),
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="one_role_per_tenant")]
        ordering = ["tenant__slug", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} · {self.tenant.slug} · {self.role}"


class GpuFlavor(models.Model):
    """A GPU node type, mirrored as a Kueue ResourceFlavor."""

    name = models.CharField(max_length=63, unique=True, validators=[validate_flavor_name])
    gpu_model = models.CharField(max_length=60, help_text="e.g. H100 SXM5, A100 PCIe 80GB")
    accelerator_type = models.CharField(
        max_length=40,
        validators=[validate_label_value],
        help_text="Ray Serve accelerator type, e.g. H100, A100, L4.",
    )
    gpu_memory_gib = models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(4096)])
    gpus_per_node = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="GPUs in one node's NVLink domain; tensor parallelism must fit inside it.",
    )
    cpu_per_gpu = models.PositiveIntegerField(default=8, validators=[MinValueValidator(1), MaxValueValidator(256)])
    memory_gib_per_gpu = models.PositiveIntegerField(
        default=64, validators=[MinValueValidator(1), MaxValueValidator(4096)]
    )
    node_labels = models.JSONField(
        default=dict, blank=True, help_text='Node labels, e.g. {"karpenter.k8s.aws/instance-family": "p5"}'
    )
    tolerations = models.JSONField(
        default=list,
        blank=True,
        help_text='e.g. [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]',
    )
    price_per_gpu_hour = models.DecimalField(
        max_digits=8, decimal_places=2, null=True, blank=True, validators=[MinValueValidator(Decimal("0"))]
    )
    # --- provisioning and placement (issue 22: quotas.nodepools, runtime.manifests.karpenter) ---
    provisioning = models.JSONField(
        default=dict,
        blank=True,
        help_text="Karpenter NodePool settings for this flavor (empty: nodes are not provisioned by the portal).",
    )
    topology_levels = models.JSONField(
        default=list,
        blank=True,
        help_text='Node label keys from the widest domain to the host, e.g. ["cloud.provider.com/block", '
        '"kubernetes.io/hostname"] (empty: no Kueue Topology).',
    )
    active = models.BooleanField(default=True)
    # Written by the Kueue sync only (quotas.kueue): why the cluster's ResourceFlavor cannot take
    # what the portal renders for the flavor, e.g. node labels Kueue keeps once topologyName is set.
    kueue_problem = models.TextField(
        blank=True,
        default="",
        editable=False,
        help_text="Why the Kueue sync cannot update this flavor's ResourceFlavor (empty: it is in sync).",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.gpu_model} ({self.name})"

    @property
    def accelerator_problem(self) -> str | None:
        """Why Ray Serve LLM would refuse this flavor's accelerator type (None: it accepts it).
        quotas.flavors refuses a new or changed one; this flags rows saved before that check."""
        return accelerator_type_problem(self.accelerator_type)

    def clean(self) -> None:
        errors = {}
        try:
            validate_node_labels(self.node_labels)  # flat, valid keys and values, none of the portal's
        except ValidationError as error:
            errors["node_labels"] = error.messages
        try:
            # The Kueue ResourceFlavor's schema and CEL rules: the API server would refuse the rest.
            validate_tolerations(self.tolerations)
        except ValidationError as error:
            errors["tolerations"] = error.messages
        from quotas.provisioning import provisioning_errors  # NodePool and Topology rules

        errors.update(provisioning_errors(self))
        if errors:
            raise ValidationError(errors)


class TenantQuota(models.Model):
    """A tenant's GPU quota for one flavor, with Kueue semantics.

    `nominal_gpus` are guaranteed; up to `borrowing_limit_gpus` more may be borrowed from the
    cohort while others leave capacity unused (borrowed capacity can be reclaimed by preemption);
    `lending_limit_gpus` caps how much of this tenant's unused nominal quota others may borrow.
    `reserved_gpus` is the sum of active reservations and is only changed under a row lock.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="quotas")
    nominal_gpus = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(100_000)])
    borrowing_limit_gpus = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(100_000)])
    lending_limit_gpus = models.PositiveIntegerField(null=True, blank=True, validators=[MaxValueValidator(100_000)])
    reserved_gpus = models.PositiveIntegerField(default=0)
    updated = models.DateTimeField(auto_now=True)

    objects = TenantOwnedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "flavor"], name="one_quota_per_tenant_flavor"),
            # The invariant the whole accounting protects, enforced by the database as well.
            models.CheckConstraint(
                condition=Q(reserved_gpus__lte=models.F("nominal_gpus") + models.F("borrowing_limit_gpus")),
                name="reserved_within_nominal_plus_borrowing",
            ),
        ]
        ordering = ["tenant__slug", "flavor__name"]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.flavor.name}: {self.reserved_gpus}/{self.nominal_gpus}"

    @property
    def ceiling_gpus(self) -> int:
        """The most this tenant may hold on the flavor: nominal plus what it may borrow."""
        return self.nominal_gpus + self.borrowing_limit_gpus

    def clean(self) -> None:
        if self.lending_limit_gpus is not None and self.lending_limit_gpus > self.nominal_gpus:
            raise ValidationError({"lending_limit_gpus": "Cannot lend more than the nominal quota."})


class QuotaReservation(models.Model):
    """GPUs held by one owner (a deployment) against a tenant quota; released exactly once."""

    quota = models.ForeignKey(TenantQuota, on_delete=models.PROTECT, related_name="reservations")
    owner_type = models.CharField(max_length=40)
    owner_id = models.PositiveBigIntegerField()
    gpus = models.PositiveIntegerField()
    borrowed_gpus = models.PositiveIntegerField(default=0, help_text="GPUs beyond nominal at reserve time.")
    created = models.DateTimeField(auto_now_add=True)
    released = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One active reservation per owner: a retried approval cannot reserve twice.
            models.UniqueConstraint(
                fields=["owner_type", "owner_id"],
                condition=Q(released__isnull=True),
                name="one_active_reservation_per_owner",
            ),
        ]
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.gpus} GPUs for {self.owner_type} {self.owner_id}"


class QuotaChangeRequest(models.Model):
    """A tenant admin's request for new quota values; a platform admin decides."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quota_requests")
    flavor = models.ForeignKey(GpuFlavor, on_delete=models.PROTECT, related_name="+")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    nominal_gpus = models.PositiveIntegerField(validators=[MaxValueValidator(100_000)])
    borrowing_limit_gpus = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(100_000)])
    lending_limit_gpus = models.PositiveIntegerField(null=True, blank=True, validators=[MaxValueValidator(100_000)])
    justification = models.TextField(max_length=2000)
    status = models.CharField(
        max_length=20, choices=QuotaChangeStatus.choices, default=QuotaChangeStatus.PENDING, db_index=True
    )
    previous = models.JSONField(default=dict, blank=True, help_text="Quota values when requested.")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True, max_length=2000)
    # --- temporary quota (issue 20: quotas.temporary) -------------------------------------------
    ends_at = models.DateTimeField(
        null=True, blank=True, help_text="Temporary change: the quota returns to its previous values at this time."
    )
    reverted_at = models.DateTimeField(null=True, blank=True, help_text="When the temporary change was reverted.")
    revert_waiting_since = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The revert is due but reservations exceed the previous ceiling; tenant admins were told.",
    )
    created = models.DateTimeField(auto_now_add=True)

    objects = TenantOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.flavor.name} → {self.nominal_gpus} ({self.status})"


from quotas.secret_models import TenantSecret  # noqa: E402 (the model lives beside; Django finds it here)
from quotas.tier_models import PriorityTier  # noqa: E402 (the same)

__all__ = ["PriorityTier", "TenantSecret"]
