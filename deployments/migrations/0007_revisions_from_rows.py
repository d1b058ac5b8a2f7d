"""Every deployment becomes a series of revisions (issue 30).

- Never approved (pending approval with nothing approved before, rejected, cancelled, deleted
  before any decision): revision 1 holds the row's spec, proposed / rejected / withdrawn.
- Approved at some time: revision 1 is the serving revision with the row's spec, decided by the
  row's approver or, where the last approval was the tenant's policy's, by the policy.
- Pending approval *after* an approval (the old model moved a running deployment there on an
  edit): the row holds the proposed spec. Revision 1 (serving) gets the spec that ran, rebuilt by
  undoing the audited edits made since the last approval; revision 2 (proposed) the row's spec;
  the row goes back to the serving spec and to the state it had before the edit.
- The GPU rule is now "held exactly while running": reservations that stopped, failed or deleting
  rows still held (the old rule released them once the workload was gone) are released.
"""

import re

from django.db import migrations
from django.utils import timezone

SPEC_FIELDS = (
    "model_source", "served_model_name", "hf_token_secret", "flavor", "backend", "tensor_parallel_size",
    "pipeline_parallel_size", "min_replicas", "max_replicas", "target_ongoing_requests", "max_model_len",
    "gpu_memory_utilization", "enable_chunked_prefill", "max_num_batched_tokens", "quantization", "dtype",
    "parameter_count_b", "serving_profile",
)  # fmt: skip
RUNNING = {"approved", "queued", "provisioning", "ready", "degraded"}
NEVER = {"rejected", "cancelled"}


def _spec(dep) -> dict:
    return {k: getattr(dep, "flavor_id" if k == "flavor" else k) for k in SPEC_FIELDS}


def _gpus(spec: dict) -> int:
    return int(spec["max_replicas"]) * int(spec["tensor_parallel_size"]) * int(spec["pipeline_parallel_size"])


def _typed(model, field: str, text, flavors):
    """An audited `before` value (str(value) in the old services) back in the field's type."""
    if text is None or text == "None":
        return None
    if field == "flavor":
        # The old services audited str(flavor), "<gpu_model> (<name>)"; the name is what lasts.
        found = re.search(r"\(([^()]*)\)$", text)
        return flavors.get(text) or flavors.get(found.group(1) if found else "")
    kind = model._meta.get_field(field).get_internal_type()
    if kind == "BooleanField":
        return text == "True"
    if kind == "FloatField":
        return float(text)
    if "Integer" in kind:
        return int(text)
    return text


def _serving_spec(apps, dep, spec: dict):
    """The spec that ran before the pending edit: undo the audited edits since the last approval."""
    audit = apps.get_model("core", "AuditEvent")
    model = apps.get_model("deployments", "ModelDeployment")
    flavors = {f"{f.name}": f.pk for f in apps.get_model("quotas", "GpuFlavor").objects.all()}
    entries = audit.objects.filter(object_type="deployments.modeldeployment", object_id=str(dep.pk)).order_by("-id")
    approved_generation = next((e.changes.get("generation") for e in entries if e.action == "deployment.approve"), None)
    serving = dict(spec)
    for entry in entries:
        if entry.action not in ("deployment.update", "deployment.scale"):
            continue
        if approved_generation is not None and (entry.changes.get("generation") or 0) <= approved_generation:
            break
        for field, text in (entry.changes.get("before") or {}).items():
            if field in serving:
                try:
                    serving[field] = _typed(model, field, text, flavors)
                except (ValueError, TypeError):
                    continue
    if serving.get("flavor") is None:
        serving["flavor"] = spec["flavor"]
    return serving


def _ever_approved(event, dep) -> bool:
    """Every approval (and every start) moved the old row to "approved" with an event."""
    return event.objects.filter(deployment_id=dep.pk, to_state="approved").exists()


def _by_policy(apps, dep) -> bool:
    """Whether the last approval was the tenant's policy's (the row names no approver then)."""
    audit = apps.get_model("core", "AuditEvent")
    last = (
        audit.objects.filter(
            object_type="deployments.modeldeployment", object_id=str(dep.pk), action="deployment.approve"
        )
        .order_by("-id")
        .first()
    )
    return dep.approved_by_id is None and last is not None and last.actor_name == "policy"


def forwards(apps, schema_editor):
    deployment = apps.get_model("deployments", "ModelDeployment")
    revision = apps.get_model("deployments", "DeploymentRevision")
    event = apps.get_model("deployments", "DeploymentEvent")
    reservation = apps.get_model("quotas", "QuotaReservation")
    quota = apps.get_model("quotas", "TenantQuota")
    now = timezone.now()
    for dep in deployment.objects.order_by("pk").iterator():
        spec = _spec(dep)
        decided = {
            "decided_by_id": dep.approved_by_id,
            "decided_at": dep.updated,
            "decision_reason": dep.decision_reason,
        }
        approved = decided | {"decided_by_policy": _by_policy(apps, dep)}
        common = {"deployment_id": dep.pk, "proposed_by_id": dep.created_by_id, "message": "Requested."}
        edit = (
            event.objects.filter(deployment_id=dep.pk, to_state="pending_approval")
            .exclude(from_state="")
            .order_by("-created", "-id")
            .first()
        )
        if dep.state == "pending_approval" and edit is not None:
            serving = _serving_spec(apps, dep, spec)
            first = revision.objects.create(
                number=1, spec=serving, gpus=_gpus(serving), status="approved", **common, **approved
            )
            revision.objects.create(
                deployment_id=dep.pk, number=2, spec=spec, gpus=_gpus(spec), status="proposed",
                proposed_by_id=dep.created_by_id, message="A change waiting for approval (from before revisions).",
            )  # fmt: skip
            for key, value in serving.items():
                setattr(dep, "flavor_id" if key == "flavor" else key, value)
            dep.state = edit.from_state
        elif dep.state == "pending_approval":
            revision.objects.create(number=1, spec=spec, gpus=_gpus(spec), status="proposed", **common)
            continue
        elif dep.state in NEVER or dep.state == "deleted" and not _ever_approved(event, dep):
            # A request deleted before any decision went straight to deleted: it was withdrawn.
            status = "rejected" if dep.state == "rejected" else "withdrawn"
            revision.objects.create(number=1, spec=spec, gpus=_gpus(spec), status=status, **common, **decided)
            first = None
        else:
            first = revision.objects.create(
                number=1, spec=spec, gpus=_gpus(spec), status="approved", **common, **approved
            )
        dep.serving_revision_id = first.pk if first else None
        if dep.state not in RUNNING and dep.reserved_gpus:
            held = reservation.objects.filter(owner_type="deployment", owner_id=dep.pk, released__isnull=True)
            for row in held:
                q = quota.objects.get(pk=row.quota_id)
                q.reserved_gpus = max(0, q.reserved_gpus - row.gpus)
                q.save(update_fields=["reserved_gpus"])
                row.released = now
                row.save(update_fields=["released"])
            dep.reserved_gpus = 0
        dep.save()


class Migration(migrations.Migration):
    dependencies = [
        ("deployments", "0006_revisions"),
        ("core", "0001_initial"),
        ("quotas", "0003_budget_idle_access_provisioning_temporary"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
