"""Tenant storage and credentials on the real API server, as the portal's ServiceAccount bound to the
Helm chart's ClusterRole (so the real authorizer proves the grants: no get or list on Secrets).

- The model-cache claim the Kueue sync creates is accepted as rendered and binds to a volume.
- Growing a claim whose volume was not provisioned by an expandable StorageClass is refused by the
  API server's PersistentVolumeClaimResize admission (kubernetes/kubernetes v1.34,
  plugin/pkg/admission/storage/persistentvolume/resize/admission.go); the portal keeps the claim
  and records why, as quotas.model_cache says.
- The tenant's Secrets are written by server-side apply with `stringData`: the API server turns it
  into `data`, a second apply replaces the value, and delete removes the Secret.
"""

from __future__ import annotations

import base64
import urllib.error

from django.conf import settings

from quotas import tenant_secrets
from quotas.kueue import sync_kueue
from quotas.models import Tenant
from runtime import k8s


def _secret(kube, name: str) -> dict[str, str] | None:
    """The Secret's values as the cluster admin reads them (the portal never does), or None."""
    try:
        secret = kube.raw(f"/api/v1/namespaces/alpha/secrets/{name}")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise
    return {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}


def test_the_claim_and_the_secrets_on_the_real_api_server(kube, world):
    claim = settings.MODEL_CACHE_PVC
    sync_kueue(tenant_id=world.alpha.pk)
    made = kube.get(k8s.PVC, claim, "alpha")
    assert made["spec"]["accessModes"] == ["ReadWriteMany"]
    assert made["spec"]["resources"]["requests"]["storage"] == f"{settings.MODEL_CACHE_SIZE_GI}Gi"
    kube.model_cache("alpha", claim)  # the cluster's part: a volume (no StorageClass, so no expansion)
    kube.wait(lambda: (kube.get(k8s.PVC, claim, "alpha").get("status") or {}).get("phase") == "Bound", what="bound")

    Tenant.objects.filter(pk=world.alpha.pk).update(model_cache_size_gi=settings.MODEL_CACHE_SIZE_GI + 1)
    assert sync_kueue(tenant_id=world.alpha.pk) >= 0
    world.alpha.refresh_from_db()
    assert "allowVolumeExpansion: true" in world.alpha.model_cache_status["problem"]
    assert "only dynamically provisioned pvc can be resized" in world.alpha.model_cache_status["problem"]
    assert (
        kube.get(k8s.PVC, claim, "alpha")["spec"]["resources"]["requests"]["storage"]
        == made["spec"]["resources"]["requests"]["storage"]
    )

    admin = world.users["tenant_admin"]
    for token in ("hf_firstTokenOnTheRealServer01", "hf_secondTokenOnTheRealServer2"):
        tenant_secrets.secret_set(tenant=world.alpha, user=admin, kind="hf_token", data={"token": token})
        assert _secret(kube, "llm-portal-hf-token") == {"HF_TOKEN": token}
    s3 = {"access_key_id": "AKIAREALPLANE0001", "secret_access_key": "real-plane-secret-key"}
    tenant_secrets.secret_set(tenant=world.alpha, user=admin, kind="s3", data=s3)
    assert _secret(kube, "llm-portal-s3")["AWS_DEFAULT_REGION"] == "us-east-1"
    for kind, name in (("hf_token", "llm-portal-hf-token"), ("s3", "llm-portal-s3")):
        assert tenant_secrets.secret_delete(tenant=world.alpha, user=admin, kind=kind)
        assert _secret(kube, name) is None
