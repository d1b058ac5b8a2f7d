"""Where a key goes once minted: a Secret in the key namespace for the Gateway (Kuadrant's
AuthPolicy reads it), and a 0600 file for the local engine (runtime.backends.local.keys).

The portal holds a key's plaintext only between minting and publishing. To reach the worker that
publishes it (and retries when the cluster hiccups), it travels through the broker sealed with
Fernet under a key derived from SECRET_KEY, and the seal expires after a day.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

from access.models import ApiKey
from runtime import k8s
from runtime.backends import cluster_configured, enabled, get_cluster
from runtime.backends.local.keys import drop_key, store_key
from runtime.manifests.gateway import key_secret_name, render_key_secret
from runtime.platform import gateway_spec

SEAL_TTL_SECONDS = 24 * 3600


def _fernet() -> Fernet:
    material = hashlib.sha256(f"llm-portal api-key seal {settings.SECRET_KEY}".encode()).digest()
    return Fernet(base64.urlsafe_b64encode(material))


def seal(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def unseal(token: str) -> str | None:
    """The plaintext, or None when the seal is forged, from another SECRET_KEY or too old."""
    try:
        return _fernet().decrypt(token.encode(), ttl=SEAL_TTL_SECONDS).decode()
    except (InvalidToken, ValueError):
        return None


def _on_cluster() -> bool:
    return gateway_spec() is not None and cluster_configured()


def publish(key: ApiKey, plaintext: str) -> str:
    """Put the key where the engines' front doors look; returns the key's gateway state."""
    if enabled(on_cluster=False):  # engines on this machine read their keys from files
        store_key(
            settings.LOCAL_RUNTIME_DIR,
            tenant_slug=key.tenant.slug,
            key_id=key.pk,
            deployment_id=key.deployment_id,
            api_key=plaintext,
        )
    if not _on_cluster():
        return "local"
    gateway = gateway_spec()
    secret = render_key_secret(
        name=key_secret_name(key.pk),
        namespace=gateway.key_namespace,
        tenant_slug=key.tenant.slug,
        deployment_id=key.deployment_id,
        api_key=plaintext,
        user_id=f"key-{key.pk}",
    )
    get_cluster().apply(secret)
    return "published"


def withdraw(key: ApiKey) -> None:
    """Remove the key from every front door (idempotent)."""
    if enabled(on_cluster=False):
        drop_key(settings.LOCAL_RUNTIME_DIR, tenant_slug=key.tenant.slug, key_id=key.pk)
    if _on_cluster():
        get_cluster().delete(k8s.SECRET, key_secret_name(key.pk), gateway_spec().key_namespace)


def refresh_local_engines(key: ApiKey) -> int:
    """Hand the key's running local engines their current key set now (each rewrites its engine's
    key file, read on the next request: no restart, the endpoint URL stays), so a revoked key is
    refused as soon as the withdrawing task ends. Returns how many engines were told."""
    from deployments.models import ModelDeployment
    from deployments.states import RUNNING
    from runtime.backends import get_backend, names

    deps = ModelDeployment.objects.filter(
        tenant_id=key.tenant_id, backend__in=names(on_cluster=False), state__in=RUNNING
    )
    if key.deployment_id:
        deps = deps.filter(pk=key.deployment_id)
    if settings.LOCAL_GATEWAY and enabled(on_cluster=False):
        # The gateway's table holds deployments asleep too (deployments.wake): a key minted or
        # revoked while none of its tenant's engines runs must reach it as well.
        from runtime.backends.local.backend import LocalBackend

        LocalBackend.instance().refresh_routes()
    told = 0
    for dep_id, backend in deps.values_list("pk", "backend"):
        told += get_backend(backend).refresh_keys(tenant_slug=key.tenant.slug, deployment_id=dep_id)
    return told
