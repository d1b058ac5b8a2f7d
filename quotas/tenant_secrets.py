"""A tenant's credentials, set in the browser or the API and written by the portal as Secrets in the
tenant namespace: a Hugging Face token (`llm-portal-hf-token`, key HF_TOKEN) and S3 credentials
(`llm-portal-s3`, the AWS SDK's variable names as keys).

Write-only: the value goes into the Secret's `stringData` and nowhere else. The portal keeps a
TenantSecret row (who set it, when, the last 4 characters of the token or access key id: see
quotas.secret_models), never the value, never reads the Secret back, and no page or response shows
the value again. Setting again replaces it (rotation); deleting removes the Secret and the row. Each
set and delete is audited (the audit row carries the fingerprint, never the value).

The value is written in the request, not by a task: a task's arguments would sit in the broker.
Set and delete lock the tenant row first, so two at once are serialised: the Secret and the row
always hold the same, last value. The Secret is written before the row is (a row means the Secret
exists) and deleted before the row is; a cluster error rolls the row back and says so.

Who may do what is one (role, tenant state, action) table, PERMISSIONS, read by the services,
the API and the page: tenant admins and platform admins set and delete, while the tenant is
active (an archived tenant runs nothing; its credentials may still be deleted); everyone who sees
the tenant sees whether each is set.

Deployments of the tenant use its Hugging Face token when they name no Secret of their own
(deployments.specs). The S3 Secret reaches the Ray containers of KubeRay deployments with an `s3://`
source as optional secretKeyRef env (runtime.manifests.storage.s3_credentials_env); KServe's storage
initializer does not read it yet (docs/install.md, step 6.6).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.exceptions import DomainError, Forbidden, TransitionError
from core.models import audit
from quotas.actors import Actor, actor_of
from quotas.kueue import _apply_if_changed
from quotas.models import Tenant
from quotas.secret_models import FINGERPRINT_CHARS, SecretKind, TenantSecret
from quotas.specs import tenant_queue_spec
from runtime import k8s
from runtime.backends import get_cluster
from runtime.manifests.kueue import render_namespace
from runtime.manifests.storage import HF_TOKEN_KEY, HF_TOKEN_SECRET, S3_SECRET, render_tenant_secret

log = logging.getLogger(__name__)


class SecretAction(StrEnum):
    SEE = "see"  # whether each credential is set, by whom, when, its last characters
    SET = "set"  # set or replace (rotate)
    DELETE = "delete"


ACTIVE, ARCHIVED = "active", "archived"
_ADMINS = frozenset({Actor.TENANT_ADMIN, Actor.PLATFORM_ADMIN})


@dataclass(frozen=True)
class Rule:
    actors: frozenset[Actor]
    states: frozenset[str]


PERMISSIONS: dict[SecretAction, Rule] = {
    SecretAction.SEE: Rule(frozenset({Actor.VIEWER, Actor.MEMBER}) | _ADMINS, frozenset({ACTIVE, ARCHIVED})),
    SecretAction.SET: Rule(_ADMINS, frozenset({ACTIVE})),
    SecretAction.DELETE: Rule(_ADMINS, frozenset({ACTIVE, ARCHIVED})),
}
SECRET_NAMES = {SecretKind.HF_TOKEN: HF_TOKEN_SECRET, SecretKind.S3: S3_SECRET}


def state_of(tenant: Tenant) -> str:
    return ARCHIVED if tenant.archived else ACTIVE


def allowed(actor: Actor | None, tenant: Tenant, action: SecretAction) -> bool:
    rule = PERMISSIONS[action]
    return actor in rule.actors and state_of(tenant) in rule.states


def authorize(user, tenant: Tenant, action: SecretAction) -> None:
    """Forbidden (403) for a role the table leaves out, TransitionError (409) for an archived tenant."""
    rule = PERMISSIONS[action]
    if actor_of(tenant, user) not in rule.actors:
        raise Forbidden("Only tenant admins and platform admins set or delete the tenant's credentials.")
    if state_of(tenant) not in rule.states:
        raise TransitionError("The tenant is archived: its credentials can be deleted, not set.")


def authorize_see(user, tenant: Tenant) -> None:
    if not allowed(actor_of(tenant, user), tenant, SecretAction.SEE):
        raise Forbidden("Only the tenant's members and platform admins see its credentials.")


# --- validation: what may go into the Secret's values ------------------------------------------

# Printable ASCII without spaces: what an HTTP header (Authorization: Bearer …) or an AWS
# signature carries; a pasted newline or space is refused rather than kept in the token.
_TOKEN = re.compile(r"^[\x21-\x7e]+$")
_REGION = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
DEFAULT_REGION = "us-east-1"


def _token_problem(value: object, *, what: str, minimum: int, maximum: int) -> str | None:
    if not isinstance(value, str) or not value:
        return f"Enter the {what}."
    if not minimum <= len(value) <= maximum:
        return f"The {what} has {minimum} to {maximum} characters (this one has {len(value)})."
    if not _TOKEN.fullmatch(value):
        return f"The {what} has letters, digits and punctuation only: no spaces or line breaks."
    return None


def _endpoint_problem(value: str) -> str | None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in value):
        return "Enter an http:// or https:// URL, e.g. https://s3.eu-west-1.amazonaws.com (empty: AWS)."
    if parts.query or parts.fragment or parts.username or parts.password or len(value) > 2048:
        return "Enter the endpoint's URL alone, without credentials, query or fragment."
    return None


def clean_hf_token(data: dict) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(the Secret's values, field errors) for {"token": …}."""
    token = data.get("token")
    if problem := _token_problem(token, what="token", minimum=8, maximum=1024):
        return {}, {"token": [problem]}
    return {HF_TOKEN_KEY: token}, {}


def clean_s3(data: dict) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(the Secret's values, field errors) for access_key_id, secret_access_key, endpoint, region."""
    errors: dict[str, list[str]] = {}
    key_id, secret = data.get("access_key_id"), data.get("secret_access_key")
    endpoint, region = data.get("endpoint") or "", data.get("region") or ""
    if problem := _token_problem(key_id, what="access key id", minimum=3, maximum=128):
        errors["access_key_id"] = [problem]
    if problem := _token_problem(secret, what="secret access key", minimum=8, maximum=256):
        errors["secret_access_key"] = [problem]
    if not isinstance(endpoint, str) or (endpoint and _endpoint_problem(endpoint)):
        errors["endpoint"] = [_endpoint_problem(str(endpoint)) or "Enter a URL."]
    if not isinstance(region, str) or (region and (len(region) > 32 or not _REGION.fullmatch(region))):
        errors["region"] = ["A region such as eu-west-1: lowercase letters, digits and '-' (empty: us-east-1)."]
    if errors:
        return {}, errors
    region = region or DEFAULT_REGION
    return {
        "AWS_ACCESS_KEY_ID": key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        # The AWS SDKs need an endpoint and a region; empty ones mean AWS itself, in us-east-1.
        "AWS_ENDPOINT_URL": endpoint.rstrip("/") or f"https://s3.{region}.amazonaws.com",
        "AWS_DEFAULT_REGION": region,
    }, {}


CLEANERS = {SecretKind.HF_TOKEN: clean_hf_token, SecretKind.S3: clean_s3}
_FINGERPRINTED = {SecretKind.HF_TOKEN: HF_TOKEN_KEY, SecretKind.S3: "AWS_ACCESS_KEY_ID"}


# --- services ------------------------------------------------------------------------------------


class ClusterUnavailable(DomainError):
    """The Secret could not be written or deleted; nothing was changed in the portal either."""

    status_code = 503
    code = "cluster_unavailable"


@contextmanager
def _cluster_call(what: str) -> Iterator[None]:
    """The API server's answer is not shown: its message could quote the request (a value)."""
    try:
        yield
    except k8s.ClusterError as error:
        log.warning("tenant secret %s failed: HTTP %s (%s)", what, error.status, type(error).__name__)
        raise ClusterUnavailable(
            f"The cluster did not accept the Secret ({'HTTP ' + str(error.status) if error.status else 'no answer'}); "
            "nothing was changed. Try again, or ask a platform admin to check the portal's access to the namespace."
        ) from None


def secret_set(*, tenant: Tenant, user, kind: str, data: dict) -> TenantSecret:
    """Write (or replace) the tenant's `kind` Secret from `data`; DomainError with field errors on
    bad input, before anything is written."""
    kind = SecretKind(kind)
    authorize(user, tenant, SecretAction.SET)
    values, errors = CLEANERS[kind](data)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        authorize(user, tenant, SecretAction.SET)  # archived meanwhile?
        obj = render_tenant_secret(
            name=SECRET_NAMES[kind], namespace=tenant.namespace, tenant_slug=tenant.slug, values=values
        )
        with _cluster_call("write"):
            cluster = get_cluster()
            # The namespace first: the Kueue sync may not have made it yet (a new tenant).
            _apply_if_changed(cluster, render_namespace(tenant_queue_spec(tenant)))
            cluster.apply(obj)
        fingerprint = values[_FINGERPRINTED[kind]][-FINGERPRINT_CHARS:]
        previous = TenantSecret.objects.filter(tenant=tenant, kind=kind).first()
        row, _ = TenantSecret.objects.update_or_create(
            tenant=tenant,
            kind=kind,
            defaults={
                "fingerprint": fingerprint,
                "set_by": user,
                "set_by_name": user.get_username(),
                "set_at": timezone.now(),
            },
        )
        audit(
            actor=user,
            action=f"tenant_secret.{'rotate' if previous else 'set'}",
            obj=row,
            tenant=tenant,
            changes={
                "kind": kind.value,
                "secret": SECRET_NAMES[kind],
                "from": {"ends_in": previous.fingerprint} if previous else {},
                "to": {"ends_in": fingerprint},
            },
        )
    return row


def secret_delete(*, tenant: Tenant, user, kind: str) -> bool:
    """Delete the tenant's `kind` Secret and its row; False when none was set."""
    kind = SecretKind(kind)
    authorize(user, tenant, SecretAction.DELETE)
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
        row = TenantSecret.objects.filter(tenant=tenant, kind=kind).first()
        if row is None:
            return False
        with _cluster_call("delete"):
            get_cluster().delete(k8s.SECRET, SECRET_NAMES[kind], tenant.namespace)
        audit(
            actor=user,
            action="tenant_secret.delete",
            obj=row,
            tenant=tenant,
            changes={"kind": kind.value, "secret": SECRET_NAMES[kind], "from": {"ends_in": row.fingerprint}},
        )
        row.delete()
    return True


def secrets_status(tenant: Tenant) -> list[dict]:
    """Per kind: the Secret's name and whether it is set (when, by whom, its last characters)."""
    rows = {row.kind: row for row in TenantSecret.objects.filter(tenant=tenant)}
    status = []
    for kind in SecretKind:
        row = rows.get(kind.value)
        status.append(
            {
                "kind": kind.value,
                "label": kind.label,
                "secret_name": SECRET_NAMES[kind],
                "set": row is not None,
                "set_at": row.set_at if row else None,
                "set_by": (row.set_by_name if row else None),
                "ends_in": row.fingerprint if row else None,
            }
        )
    return status


def hf_token_secret(tenant: Tenant) -> str | None:
    """The tenant's Hugging Face token Secret's name while one is set (deployments.specs)."""
    if TenantSecret.objects.filter(tenant=tenant, kind=SecretKind.HF_TOKEN).exists():
        return HF_TOKEN_SECRET
    return None
