"""Objects made fresh for every call of a reliability test (a call may change or delete what it
touches): deployments in a given state, quota change requests, flavors, people, keys."""

from __future__ import annotations

import itertools

from django.contrib.auth.models import User

from core.models import AuditEvent
from deployments import services as deployment_services
from deployments.models import ModelDeployment
from quotas import services as quota_services
from quotas.choices import QuotaChangeStatus
from quotas.models import GpuFlavor, Membership, QuotaChangeRequest, TenantQuota
from tests.support.factories import draft as model_draft

names = itertools.count()


def fresh_dep(world, state: str = "pending") -> ModelDeployment:
    """A fresh deployment: pending (revision 1 waits), approved, stopped, changed (revision 2, a
    change, waits beside serving revision 1) or renamed (revision 2 serves, 1 can be rolled back to)."""
    member = world.users["member"]
    dep = deployment_services.deployment_create(
        tenant=world.alpha, user=member, data=model_draft(world, name=f"m{next(names)}", max_replicas=1)
    )
    if state != "pending":
        deployment_services.deployment_approve(
            deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
        )
    if state == "stopped":
        deployment_services.deployment_stop(deployment_id=dep.pk, user=member)
    change = {"changed": {"max_model_len": 4096}, "renamed": {"served_model_name": f"renamed-{dep.pk}"}}.get(state)
    if change:
        deployment_services.deployment_update(deployment_id=dep.pk, user=member, data=change)
    return dep


def fresh_quota_request(world) -> QuotaChangeRequest:
    QuotaChangeRequest.objects.filter(status=QuotaChangeStatus.PENDING).update(status=QuotaChangeStatus.REJECTED)
    return quota_services.quota_change_request_create(
        tenant=world.alpha, flavor=world.a100, user=world.users["tenant_admin"], nominal_gpus=6, justification="more"
    )


def flavor_body(name: str) -> dict:
    return {
        "name": name,
        "gpu_model": "L4",
        "accelerator_type": "L4",
        "gpu_memory_gib": 24,
        "gpus_per_node": 4,
        "cpu_per_gpu": 8,
        "memory_gib_per_gpu": 32,
        "node_labels": {},
        "tolerations": [],
        "price_per_gpu_hour": "0.80",
        "active": True,
    }


def fresh_flavor() -> GpuFlavor:
    return GpuFlavor.objects.create(
        name=f"l4-{next(names)}", gpu_model="L4", accelerator_type="L4", gpu_memory_gib=24, gpus_per_node=4
    )


def fresh_person(tenant=None) -> User:
    """A new account (a member of `tenant` when given), so repeated calls never collide."""
    user = User.objects.create_user(f"person-{next(names)}")
    if tenant is not None:
        Membership.objects.create(user=user, tenant=tenant, role="member")
    return user


def alpha_quota(world) -> TenantQuota:
    return TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)


def alpha_audit(world) -> AuditEvent:
    return (
        AuditEvent.objects.filter(tenant=world.alpha).first()
        or fresh_dep(world)
        and AuditEvent.objects.filter(tenant=world.alpha).first()
    )


def fresh_key(world):
    from access.services import key_mint

    return key_mint(user=world.users["member"], tenant=world.alpha, name=f"k{next(names)}")[0]


def fresh_publication(world):
    """A fresh alpha deployment published to beta (approval by the owner)."""
    from sharing.services import publish

    dep = fresh_dep(world, "approved")
    return publish(user=world.users["platform_admin"], deployment_id=dep.pk, tenants=["beta"])


def fresh_subscription(world):
    """Beta asks for a fresh alpha publication: a requested subscription."""
    from django.contrib.auth.models import User

    from quotas.models import Membership
    from sharing.services import subscribe

    admin, made = User.objects.get_or_create(username="beta-admin")
    if made:
        Membership.objects.create(user=admin, tenant=world.beta, role="tenant_admin")
    return subscribe(user=admin, consumer=world.beta, deployment_id=fresh_publication(world).deployment_id)


def fresh_beta_offer(world) -> int:
    """A fresh beta deployment shared with every tenant, approved by policy: its id."""
    from deployments import services as deployment_services
    from sharing.services import publish

    dep = deployment_services.deployment_create(
        tenant=world.beta,
        user=world.users["other_member"],
        data=model_draft(world, name=f"b{next(names)}", served_model_name=f"b{next(names)}", max_replicas=1),
    )
    publish(user=world.users["platform_admin"], deployment_id=dep.pk, to_all=True, auto_approve=True)
    return dep.pk
