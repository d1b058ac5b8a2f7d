"""What a revision changes, in words: the field-by-field diff, the GPU and cost delta and how
the backend applies it. Read-side only (no writes); the approvals page, the deployment page, the
history and the API all use these, so a change reads the same everywhere."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from catalog.choices import Task
from deployments.choices import Dtype, KvCacheDtype, Quantization, ServingProfile
from deployments.models import SPEC_FIELDS, SPEC_LABELS, DeploymentRevision, ModelDeployment
from deployments.services.common import apply_spec, spec_gpus, spec_of
from deployments.specs import deployment_spec
from deployments.states import RUNNING
from quotas.models import GpuFlavor
from quotas.pricing import price_per_hour
from runtime.backends import traits as backend_traits

LABELS = SPEC_LABELS
assert set(LABELS) == set(SPEC_FIELDS), "every spec field needs a readable label"
_CHOICES = {
    "quantization": Quantization,
    "dtype": Dtype,
    "kv_cache_dtype": KvCacheDtype,
    "task": Task,
    "serving_profile": ServingProfile,
}


def _flavor_names(*specs: dict | None) -> dict[int, str]:
    ids = {s.get("flavor") for s in specs if s}
    return {f.pk: str(f) for f in GpuFlavor.objects.filter(pk__in=ids)}  # "<gpu_model> (<name>)"


def shown(field: str, value, flavors: dict[int, str]) -> str:
    """A spec value as a person reads it."""
    if field == "flavor":
        return flavors.get(value, f"flavor #{value}")
    if value is None or value == "" and field not in _CHOICES:
        return "—"
    if isinstance(value, bool):
        return "on" if value else "off"
    if field in _CHOICES:
        try:
            return str(_CHOICES[field](value).label)
        except ValueError:
            return str(value)
    return str(value)


def spec_diff(old: dict | None, new: dict, *, flavors: dict[int, str] | None = None) -> list[dict]:
    """Field-by-field: [{field, label, before, after}] for the fields that differ (all of them
    against nothing, for a first request)."""
    flavors = _flavor_names(old, new) if flavors is None else flavors
    rows = []
    for field in SPEC_FIELDS:
        before = None if old is None else old.get(field)
        if old is not None and before == new.get(field):
            continue
        rows.append(
            {
                "field": field,
                "label": LABELS[field],
                "before": "" if old is None else shown(field, before, flavors),
                "after": shown(field, new.get(field), flavors),
            }
        )
    return rows


@dataclass(frozen=True)
class ChangeSummary:
    """What approving a revision does to a deployment, before anyone approves it."""

    rows: list[dict]
    gpus_before: int
    gpus_after: int
    cost_before: Decimal | None  # per hour at the flavor's GPU-hour price (None: no price set)
    cost_after: Decimal | None
    how: str  # "start" | "in_place" | "rolling" | "recreate" | "next_start"
    how_text: str
    swap_gpus: int  # GPUs the cluster needs while the change is applied

    @property
    def gpu_delta(self) -> int:
        return self.gpus_after - self.gpus_before

    @property
    def cost_delta(self) -> Decimal | None:
        if self.cost_before is None or self.cost_after is None:
            return None
        return self.cost_after - self.cost_before


def _hourly(spec: dict | None) -> Decimal | None:
    if spec is None:
        return Decimal(0)
    return price_per_hour(GpuFlavor.objects.filter(pk=spec.get("flavor")).first(), spec_gpus(spec))


def _impact(dep: ModelDeployment, new: dict) -> tuple[str, str]:
    """How the backend applies `new` over what runs (pure renders of both specs)."""
    future = ModelDeployment.objects.select_related("tenant", "flavor").get(pk=dep.pk)
    apply_spec(future, new)
    try:
        return backend_traits(dep.backend).impact(deployment_spec(dep), deployment_spec(future))
    except ValueError as error:  # a spec that no longer renders: say so instead of guessing
        return "recreate", f"Cannot tell how it is applied: {error}"


def change_summary(dep: ModelDeployment, rev: DeploymentRevision) -> ChangeSummary:
    """The diff against what serves, the GPU and hourly cost delta, and how it is applied."""
    serving = spec_of(dep) if dep.serving_revision_id else None
    before_gpus = dep.gpus_needed if serving is not None else 0
    after = rev.spec
    if serving is None:
        how, text, swap = "start", "Starts the deployment once approved.", rev.gpus
    elif dep.state not in RUNNING:
        how, text, swap = "next_start", "Nothing runs now: it applies at the next start.", 0
    else:
        how, text = _impact(dep, after)
        swap = {
            "in_place": max(before_gpus, rev.gpus),
            "recreate": max(before_gpus, rev.gpus),
            "rolling": rev.gpus + after.get("tensor_parallel_size", 1) * after.get("pipeline_parallel_size", 1),
        }[how]
    return ChangeSummary(
        rows=spec_diff(serving, after),
        gpus_before=before_gpus,
        gpus_after=rev.gpus,
        cost_before=_hourly(serving),
        cost_after=_hourly(after),
        how=how,
        how_text=text,
        swap_gpus=swap,
    )


def revision_pair_diff(dep: ModelDeployment, a: int, b: int) -> list[dict]:
    """The diff between any two revisions of a deployment (LookupError if either is missing)."""
    found = {r.number: r.spec for r in dep.revisions.filter(number__in=(a, b))}
    if a not in found or b not in found:
        raise LookupError(f"deployment {dep.pk} has no revision {a if a not in found else b}")
    return spec_diff(found[a], found[b])


def history(dep: ModelDeployment) -> list[dict]:
    """Every revision, newest first, with who proposed and decided it, when and why, and what it
    changed against the revision before it."""
    revisions = list(dep.revisions.select_related("proposed_by", "decided_by").order_by("-number"))
    by_number = {r.number: r for r in revisions}
    flavors = _flavor_names(*(r.spec for r in revisions))  # one query for the whole history
    rows = []
    for rev in revisions:
        previous = by_number.get(rev.number - 1)
        rows.append(
            {
                "revision": rev,
                "serving": rev.pk == dep.serving_revision_id,
                "proposer": rev.proposed_by.username if rev.proposed_by_id and rev.proposed_by else "",
                "decider": rev.decider,
                "changes": spec_diff(previous.spec if previous else None, rev.spec, flavors=flavors),
            }
        )
    return rows
