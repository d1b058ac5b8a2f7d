"""Priority tiers (issue 35): what a platform admin offers (production, standard, experiment …),
each a Kueue WorkloadPriorityClass the portal renders and keeps in step (quotas.kueue), named
`llm-portal-<name>` so the portal never takes over a class someone else made.

A deployment's revision names its tier (`ModelDeployment.priority_tier`, '' = none: Kueue's
default priority, 0), which reaches its workload as the `kueue.x-k8s.io/priority-class` label.
Within a ClusterQueue whose preemption is `withinClusterQueue: LowerPriority`, Kueue admits the
higher value first and may evict a lower-valued workload to admit it (kubernetes-sigs/kueue
v0.19.2, pkg/scheduler/preemption/preemption.go, reason `InClusterQueue`). A tenant's policy says
which tiers it may use (`Tenant.allowed_tiers`) and which of them its policy may approve without
a person (`Tenant.auto_approve_tiers`).
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from quotas.validators import validate_dns1123_label

TIER_NAME_MAX = 40  # `llm-portal-` + name stays a short DNS-1123 subdomain
CLASS_PREFIX = "llm-portal-"
# Kueue's `value` is an int32; Kubernetes keeps values above one billion for system classes, and
# the portal stays below them too.
TIER_VALUE_MIN = -1_000_000_000
TIER_VALUE_MAX = 1_000_000_000


def validate_tier_name(value: str) -> None:
    validate_dns1123_label(value, max_length=TIER_NAME_MAX)


class PriorityTier(models.Model):
    """One tier: its name (fixed once made), what people read, and Kueue's priority value."""

    name = models.CharField(
        max_length=TIER_NAME_MAX,
        unique=True,
        validators=[validate_tier_name],
        help_text="DNS-1123 label; the Kueue WorkloadPriorityClass is llm-portal-<name>. Fixed once made.",
    )
    display_name = models.CharField(max_length=100)
    value = models.IntegerField(
        validators=[MinValueValidator(TIER_VALUE_MIN), MaxValueValidator(TIER_VALUE_MAX)],
        help_text="Kueue priority: higher is admitted first and may preempt lower ones in the same ClusterQueue.",
    )
    description = models.CharField(max_length=300, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-value", "name"]

    def __str__(self) -> str:
        return f"{self.display_name} ({self.value})"

    @property
    def class_name(self) -> str:
        """The Kueue WorkloadPriorityClass this tier is."""
        return CLASS_PREFIX + self.name
