"""What a key may call on its tenant's endpoint (issue 34): the served model names its tenant's
deployments answer under, all of them for a tenant-wide key, its own for a deployment's key.

The tenant endpoint's `GET /<tenant>/v1/models` is answered here (the Gateway routes it to the
portal: runtime.manifests.tenant_route, MODELS_PATH), in OpenAI's list shape, without asking any
engine. A deployment is listed while it runs (deployments.states.RUNNING: approved and on its way,
or serving), the states in which its route exists."""

from __future__ import annotations

from access.models import ApiKey
from access.services import key_lookup
from deployments.models import ModelDeployment
from deployments.states import RUNNING
from sharing.services import running_shared_with


def key_for_tenant(plaintext: str, tenant_slug: str) -> ApiKey | None:
    """The active key with this plaintext if it belongs to `tenant_slug`, else None (a foreign key
    and an unknown one look the same to the caller)."""
    key = key_lookup(plaintext) if plaintext else None
    if key is None or key.tenant.slug != tenant_slug:
        return None
    return key


def models_for_key(key: ApiKey) -> list[dict]:
    """OpenAI model objects (`id`, `object`, `created`, `owned_by`) for what `key` reaches."""
    deployments = ModelDeployment.objects.filter(tenant_id=key.tenant_id, state__in=RUNNING)
    if key.deployment_id:
        deployments = deployments.filter(pk=key.deployment_id)
    fields = ("served_model_name", "name", "created", "tenant__slug")
    rows = list(deployments.values_list(*fields))
    if not key.deployment_id:
        own = {served or name for served, name, _, _ in rows}
        shared = running_shared_with(key.tenant).order_by("pk").values_list(*fields)
        rows += [row for row in shared if (row[0] or row[1]) not in own]
    cards = {}
    for served, name, created, owner in rows:  # one card per name; the tenant's own come first
        cards.setdefault(
            served or name,
            {"id": served or name, "object": "model", "created": int(created.timestamp()), "owned_by": owner},
        )
    return [cards[name] for name in sorted(cards)]
