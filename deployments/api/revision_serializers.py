"""Revisions in the API: a history row, the proposed change's summary and a diff between two.

The words and numbers come from deployments.changes (shared with the pages), so a change reads
the same in the browser and the API. A revision's `spec` names its flavor by name, as every
other deployment field in the API does; the stored spec holds the flavor's primary key.
"""

from __future__ import annotations

from rest_framework import serializers

from deployments.changes import change_summary, spec_diff
from deployments.choices import RevisionStatus
from deployments.models import DeploymentRevision, ModelDeployment
from quotas.models import GpuFlavor
from quotas.pricing import price_per_hour

NUMBER_MAX = 2_147_483_647  # a revision number is a PositiveIntegerField


class ChangeRowSerializer(serializers.Serializer):
    """One field that differs, as a person reads it ("before" is empty against nothing)."""

    field = serializers.CharField()
    label = serializers.CharField()
    before = serializers.CharField(allow_blank=True)
    after = serializers.CharField()


def _price_per_hour() -> serializers.DecimalField:
    return serializers.DecimalField(
        max_digits=14,
        decimal_places=2,
        allow_null=True,
        help_text="What it costs per hour while it runs: its GPUs × the flavor's price per GPU-hour (the rule "
        "the usage ledger charges with); null when the flavor has no price.",
    )


class _RevisionBase(serializers.Serializer):
    number = serializers.IntegerField()
    status = serializers.ChoiceField(choices=RevisionStatus.choices)
    message = serializers.CharField(allow_blank=True)
    rollback_of = serializers.IntegerField(allow_null=True, help_text="The revision this one restores.")
    proposed_by = serializers.CharField(allow_null=True, help_text="Who proposed it (null: the portal).")
    proposed_at = serializers.DateTimeField()


class RevisionSerializer(_RevisionBase):
    """One revision of a deployment, with who proposed and decided it and what it changed."""

    spec = serializers.JSONField(help_text="The spec fields of this revision (the flavor by name).")
    gpus = serializers.IntegerField(help_text="GPUs it reserves while it runs: max replicas × TP × PP.")
    price_per_hour = _price_per_hour()
    decided_by = serializers.CharField(
        allow_null=True, help_text='A user name, or "policy" for the tenant\'s policy; null while undecided.'
    )
    decided_at = serializers.DateTimeField(allow_null=True)
    decision_reason = serializers.CharField(allow_blank=True)
    serving = serializers.BooleanField(help_text="This revision is the one that runs (the last approved).")
    changes = ChangeRowSerializer(many=True, help_text="What it changed against the revision before it.")


class ProposedRevisionSerializer(_RevisionBase):
    """The change waiting for a decision: its diff against what serves, the GPU and hourly cost
    delta, and how the backend applies it (and the GPUs the swap needs meanwhile)."""

    changes = ChangeRowSerializer(many=True, help_text="Field by field against the serving revision.")
    gpus_before = serializers.IntegerField()
    gpus_after = serializers.IntegerField()
    gpu_delta = serializers.IntegerField()
    price_per_hour = _price_per_hour()
    cost_before = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    cost_after = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    cost_delta = serializers.DecimalField(
        max_digits=14, decimal_places=2, allow_null=True, help_text="Per hour; null when a flavor has no price."
    )
    how = serializers.ChoiceField(choices=["start", "in_place", "rolling", "recreate", "next_start"])
    how_text = serializers.CharField()
    swap_gpus = serializers.IntegerField(help_text="GPUs the cluster needs while the change is applied.")


class RevisionDiffQuerySerializer(serializers.Serializer):
    """`?from=a&to=b`: two revision numbers of the same deployment."""

    def get_fields(self):  # `from` is a Python keyword: no class attribute can carry the name
        bounds = {"min_value": 1, "max_value": NUMBER_MAX}
        return {
            "from": serializers.IntegerField(**bounds, help_text="The older revision's number."),
            "to": serializers.IntegerField(**bounds, help_text="The newer revision's number."),
        }


class RevisionDiffSerializer(serializers.Serializer):
    def get_fields(self):
        return {
            "from": serializers.IntegerField(),
            "to": serializers.IntegerField(),
            "changes": ChangeRowSerializer(many=True),
        }


def _who(user) -> str | None:
    return user.username if user is not None else None


def _common(rev: DeploymentRevision) -> dict:
    return {
        "number": rev.number,
        "status": rev.status,
        "message": rev.message,
        "rollback_of": rev.rollback_of,
        "proposed_by": _who(rev.proposed_by),
        "proposed_at": rev.proposed_at,
    }


def revision_rows(dep: ModelDeployment, revisions: list[DeploymentRevision]) -> list[dict]:
    """RevisionSerializer's input for these revisions of `dep` (a page of its history): the same
    rows as deployments.changes.history, for a page instead of the whole history."""
    numbers = {r.number - 1 for r in revisions}
    previous = dict(dep.revisions.filter(number__in=numbers).values_list("number", "spec"))
    flavors = {f.pk: f for f in GpuFlavor.objects.filter(pk__in={r.spec.get("flavor") for r in revisions})}
    return [
        _common(rev)
        | {
            "spec": rev.spec | {"flavor": getattr(flavors.get(rev.spec.get("flavor")), "name", None)},
            "gpus": rev.gpus,
            "price_per_hour": price_per_hour(flavors.get(rev.spec.get("flavor")), rev.gpus),
            "decided_by": rev.decider or None,
            "decided_at": rev.decided_at,
            "decision_reason": rev.decision_reason,
            "serving": rev.pk == dep.serving_revision_id,
            "changes": spec_diff(previous.get(rev.number - 1), rev.spec),
        }
        for rev in revisions
    ]


def proposal(dep: ModelDeployment) -> dict | None:
    """ProposedRevisionSerializer's input for the revision waiting on `dep`, or None."""
    rev = dep.revisions.select_related("proposed_by").filter(status=RevisionStatus.PROPOSED).first()
    if rev is None:
        return None
    summary = change_summary(dep, rev)
    return _common(rev) | {
        "changes": summary.rows,
        "gpus_before": summary.gpus_before,
        "gpus_after": summary.gpus_after,
        "gpu_delta": summary.gpu_delta,
        "price_per_hour": summary.cost_after,
        "cost_before": summary.cost_before,
        "cost_after": summary.cost_after,
        "cost_delta": summary.cost_delta,
        "how": summary.how,
        "how_text": summary.how_text,
        "swap_gpus": summary.swap_gpus,
    }
