"""Shared steps for the tests on the real control plane: the portal's own calls, in process."""

from __future__ import annotations

import json

from deployments import services
from deployments.models import ModelDeployment
from deployments.reconcile import reconcile
from quotas.kueue import sync_kueue
from quotas.models import GpuFlavor, Tenant
from quotas.specs import flavor_spec
from runtime import k8s
from runtime.manifests.kueue import render_cpu_resource_flavor, render_resource_flavor
from runtime.platform import platform_spec
from runtime.status import current_workload
from tests.support.factories import draft


def onboard(kube, *flavors: GpuFlavor, gpu_nodes: int = 1, gpus: int = 8) -> None:
    """Mirror the tenants to Kueue and add KWOK nodes: one CPU node for heads, `gpu_nodes` per flavor."""
    sync_kueue()
    claim = platform_spec().model_cache_pvc
    if claim:  # the portal made each tenant's claim; a volume for it is the cluster's part
        for tenant in Tenant.objects.all():
            kube.model_cache(tenant.namespace, claim)
    kube.nodes_for_flavor(render_cpu_resource_flavor(platform_spec()), gpus=0)
    for flavor in flavors:
        kube.nodes_for_flavor(render_resource_flavor(flavor_spec(flavor)), count=gpu_nodes, gpus=gpus)


def request_and_approve(world, tenant=None, *, user=None, **overrides) -> ModelDeployment:
    tenant = tenant or world.alpha
    user = user or (world.users["member"] if tenant == world.alpha else world.users["other_member"])
    overrides.setdefault("min_replicas", 1)
    overrides.setdefault("max_replicas", 1)
    dep = services.deployment_create(tenant=tenant, user=user, data=draft(world, **overrides))
    services.deployment_approve(
        deployment_id=dep.pk, revision=dep.proposed_number, approver=world.users["platform_admin"]
    )
    dep.refresh_from_db()
    return dep


def converge(kube, dep: ModelDeployment, until, *, timeout: float = 60, what: str = "state") -> ModelDeployment:
    """Reconcile as the worker would, until `until(dep)` holds."""

    def step():
        dep.refresh_from_db()
        reconcile(dep)
        dep.refresh_from_db()
        return until(dep)

    try:
        kube.wait(step, timeout=timeout, what=f"{dep.resource_name}: {what}")
    except AssertionError as exc:  # say where it stopped, not where it started
        dep.refresh_from_db()
        raise AssertionError(f"last state {dep.state}: {dep.status_message}\n{scene(kube, dep)}\n{exc}") from None
    return dep


def scene(kube, dep: ModelDeployment) -> str:
    """What the cluster holds for a deployment, for a failing wait: the RayService's status, its
    Workload's conditions and each pod's phase, node and scheduling gates."""
    namespace = dep.tenant.namespace
    obj = kube.get(k8s.RAYSERVICE, dep.resource_name, namespace) or {}
    workload = workload_of(kube, dep) or {}
    lines = [f"rayservice status: {json.dumps(obj.get('status'))[:3000]}"]
    lines += [
        f"workload {c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}"
        for c in (workload.get("status") or {}).get("conditions") or []
    ]
    for pod in kube.pods(namespace):
        spec, status = pod["spec"], pod.get("status") or {}
        gates = [g["name"] for g in spec.get("schedulingGates") or []]
        waiting = [c.get("message") for c in status.get("conditions") or [] if c.get("status") == "False"]
        lines.append(
            f"pod {pod['metadata']['name']}: {status.get('phase')} on {spec.get('nodeName')} gates={gates} {waiting}"
        )
    return "\n".join(lines)


def workload_of(kube, dep: ModelDeployment) -> dict | None:
    items = [
        w
        for w in kube.list(k8s.WORKLOAD, dep.tenant.namespace)
        if any(ref.get("name") == dep.resource_name for ref in w["metadata"].get("ownerReferences", []))
    ]
    return current_workload(items)  # an elastic job's slices share the owner: the live one


def condition(obj: dict | None, kind: str) -> dict:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return {}
