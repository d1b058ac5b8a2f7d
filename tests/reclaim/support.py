"""A serving deployment and hand-set metric points for the reclaim tests."""

from __future__ import annotations

from datetime import datetime, timedelta

from deployments import services
from deployments.choices import State
from deployments.models import DeploymentEvent, ModelDeployment
from metrics.models import MetricSample, Resolution
from tests.support.factories import draft


def serving(world, *, name: str = "chat", since: datetime, **overrides) -> ModelDeployment:
    """A deployment of alpha approved and ready since `since` (its timeline moved back there)."""
    dep = services.deployment_create(
        tenant=world.alpha, user=world.users["member"], data=draft(world, name=name, **overrides)
    )
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    services.deployment_observe(deployment_id=dep.pk, generation=1, state=State.READY, conditions=[], reason="Ready")
    DeploymentEvent.objects.filter(deployment=dep).update(created=since)
    dep.refresh_from_db()
    return dep


def points(
    dep: ModelDeployment,
    *,
    start: datetime,
    end: datetime,
    tokens_until: datetime | None = None,
    step: timedelta = timedelta(minutes=1),
    resolution: int = Resolution.RAW,
    pooling: bool = False,
) -> None:
    """Points every `step` from `start` to `end` (inclusive), each with a rate over its step:
    tokens generated up to `tokens_until`, none after; `pooling`: prompt tokens processed instead,
    and never a generated one (an embedding or score engine's metrics)."""
    rows, ts = [], start
    while ts <= end:
        busy = tokens_until is not None and ts <= tokens_until
        rows.append(
            MetricSample(
                deployment=dep,
                ts=ts,
                resolution=resolution,
                interval_s=step.total_seconds(),
                generation_tokens_per_s=0.0 if pooling else (42.0 if busy else 0.0),
                prompt_tokens_per_s=(42.0 if busy else 0.0) if pooling else None,
                running=1.0 if busy else 0.0,
                waiting=0.0,
            )
        )
        ts += step
    MetricSample.objects.bulk_create(rows)


def give_emails(world) -> None:
    """The tenant admin gets an address, so the policy's e-mails have a recipient."""
    admin = world.users["tenant_admin"]
    admin.email = "alpha-admin@example.com"
    admin.save(update_fields=["email"])
