"""API-key services: mint (shown once), revoke, expire. Row locks, audit, publishing on commit."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from access.keystore import seal
from access.models import ApiKey
from access.permissions import authorize_mint, authorize_revoke
from core.exceptions import ConflictError, DomainError
from core.limits import check_room
from core.models import audit
from deployments.models import ModelDeployment
from deployments.states import DELETED_OR_DELETING, GONE
from quotas.models import Membership, Tenant
from runtime.keys import MINTED_KEY_PREFIX

KEY_PREFIX = MINTED_KEY_PREFIX  # one place: runtime.keys, where the redactor reads its shape
PREFIX_SHOWN = len(KEY_PREFIX) + 8
DEFAULT_DAYS = 90
MAX_DAYS = 365
NAME_PATTERN = re.compile(r"^[\w .:@-]{1,100}$")
NAME_MESSAGE = "1 to 100 letters, digits, spaces and . : @ - _ only."


def key_digest(plaintext: str) -> str:
    """SHA-256 of the key: enough for 32 random bytes (no dictionary to try)."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


def key_lookup(plaintext: str) -> ApiKey | None:
    """The active key with this plaintext, compared in constant time against the stored digest."""
    digest = key_digest(plaintext)
    key = ApiKey.objects.active().filter(key_hash=digest).first()
    return key if key is not None and secrets.compare_digest(key.key_hash, digest) else None


def key_tenant(*, tenant: Tenant | None, deployment: ModelDeployment | None) -> Tenant:
    """The tenant a key is minted in: the one named, else the chosen deployment's (a deployment
    implies its tenant). The one rule for the mint form and the API."""
    if deployment is None:
        if tenant is None:
            raise DomainError("Choose a tenant, or a deployment (the key is minted in its tenant).", field="tenant")
        return tenant
    if tenant is not None and deployment.tenant_id != tenant.pk:
        raise DomainError(
            f"That deployment belongs to {deployment.tenant.slug}, not {tenant.slug}.", field="deployment"
        )
    return deployment.tenant


def _deployment_for(tenant: Tenant, deployment_id: int | None) -> ModelDeployment | None:
    if deployment_id is None:
        return None
    dep = ModelDeployment.objects.select_for_update().filter(pk=deployment_id, tenant=tenant).first()
    if dep is None:
        raise DomainError("No such deployment in this tenant.", field="deployment")
    if dep.state in DELETED_OR_DELETING:
        raise DomainError("The deployment is being deleted.", field="deployment")
    return dep


@transaction.atomic
def key_mint(
    *, user, tenant: Tenant, name: str, deployment_id: int | None = None, expires_in_days: int = DEFAULT_DAYS
) -> tuple[ApiKey, str]:
    """Mint a key for one deployment of `tenant` (or all of them); returns (row, plaintext).

    The plaintext is returned once and never stored: the row keeps its digest. It is published
    (gateway Secret, local engine file) by a task after the commit.
    """
    # NO KEY UPDATE locks: they serialize with archiving, membership changes and each other, but
    # not with inserts of rows that reference these (audit, keys), which take KEY SHARE; a plain
    # FOR UPDATE there can close a deadlock cycle with a transaction that inserted such a row.
    tenant = Tenant.objects.select_for_update(no_key=True).get(pk=tenant.pk)
    # The maker's row and memberships, fresh and locked: a removal or deactivation committed
    # meanwhile is seen here, and one still running waits for this key, then revokes it.
    user = get_user_model().objects.select_for_update(no_key=True).get(pk=user.pk)
    list(Membership.objects.select_for_update(no_key=True).filter(tenant=tenant, user=user))
    authorize_mint(tenant, user)
    # Under the maker's row lock (above): two concurrent mints cannot both see room for one more.
    check_room(
        held=ApiKey.objects.active().filter(created_by=user).count(),
        setting="MAX_API_KEYS_PER_USER",
        what="active keys made by you",
    )
    if tenant.archived:
        raise ConflictError("The tenant is archived: no new keys.")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise DomainError(NAME_MESSAGE, field="name")
    if not isinstance(expires_in_days, int) or not 1 <= expires_in_days <= MAX_DAYS:
        raise DomainError(f"Between 1 and {MAX_DAYS} days.", field="expires_in_days")
    dep = _deployment_for(tenant, deployment_id)
    plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        tenant=tenant,
        deployment=dep,
        name=name,
        prefix=plaintext[:PREFIX_SHOWN],
        key_hash=key_digest(plaintext),
        created_by=user,
        expires_at=timezone.now() + timedelta(days=expires_in_days),
        gateway_state="pending",
    )
    audit(
        actor=user,
        action="apikey.mint",
        obj=key,
        tenant=tenant,
        changes={"name": name, "prefix": key.prefix, "deployment": dep.pk if dep else None, "days": expires_in_days},
    )
    from access.tasks import publish_key_task

    publish_key_task.delay_on_commit(key.pk, seal(plaintext))
    return key, plaintext


@transaction.atomic
def key_revoke(*, user, key_id: int, reason: str = "") -> ApiKey:
    """Revoke a key now (409 when it already is); the gateway and engines drop it after commit."""
    key = ApiKey.objects.select_for_update().select_related("tenant").filter(pk=key_id).first()
    if key is None:
        raise DomainError("No such key.", code="not_found")
    authorize_revoke(user, key)
    if key.revoked_at is not None:
        raise ConflictError("The key is already revoked.")
    return _revoke(key, actor=user, reason=reason)


def _revoke(key: ApiKey, *, actor, reason: str) -> ApiKey:
    """Revoke a locked, live key: record who and why, and withdraw it from every front door
    (gateway Secret, local engine file and the engines using it) once the transaction commits."""
    key.revoked_at, key.revoked_by = timezone.now(), actor if getattr(actor, "pk", None) else None
    key.save(update_fields=["revoked_at", "revoked_by"])
    audit(
        actor=actor, action="apikey.revoke", obj=key, tenant=key.tenant, reason=reason, changes={"prefix": key.prefix}
    )
    from access.tasks import withdraw_key_task

    withdraw_key_task.delay_on_commit(key.pk)
    return key


@transaction.atomic
def keys_revoke_unentitled(*, maker_id: int | None = None, reason: str = "") -> list[int]:
    """Revoke the live keys whose maker may no longer mint them (ApiKeyQuerySet.unentitled: they
    left the tenant, hold a role that does not mint, were deactivated or deleted); only the keys
    of `maker_id` when given. Audited with the actor "system"; returns the revoked keys' ids.

    Called at once by portal.deprovision when a membership, a role, a platform-admin standing or
    an account changes, and every minute by the keys sweep for changes that sent no signal (a
    bulk `update()`)."""
    keys = ApiKey.objects.active()  # an expired key is the expiry sweep's to withdraw
    if maker_id is not None:
        keys = keys.filter(created_by_id=maker_id)
    return _revoke_all(keys.unentitled(), reason or "Its maker may no longer mint keys for this tenant.")


@transaction.atomic
def keys_revoke_of_maker(*, maker_id: int, reason: str) -> list[int]:
    """Revoke every live key `maker_id` made, whatever their standing (their account is being
    deleted: once it is gone, nothing would say whose the keys were). Returns the keys' ids."""
    return _revoke_all(ApiKey.objects.active().filter(created_by_id=maker_id), reason)


def _revoke_all(keys, reason: str) -> list[int]:
    due = keys.select_for_update(of=("self",)).select_related("tenant").order_by("pk")
    return [_revoke(key, actor="system", reason=reason).pk for key in due]


def keys_expire() -> list[int]:
    """Withdraw keys that no longer open anything but are still published: expired ones (the
    gateway cannot read an expiry from a Secret, so the portal removes them) and those of a
    deleted deployment (revoked here, by the system); returns their ids."""
    from access.tasks import withdraw_key_task

    now = timezone.now()
    due = ApiKey.objects.filter(revoked_at__isnull=True).filter(Q(expires_at__lte=now) | Q(deployment__state__in=GONE))
    ids = []
    for key in due.exclude(gateway_state="withdrawn").select_related("tenant", "deployment"):
        with transaction.atomic():
            live = ApiKey.objects.select_for_update().filter(pk=key.pk, revoked_at__isnull=True).first()
            if live is None or live.gateway_state == "withdrawn":
                continue  # revoked or withdrawn meanwhile: its own withdrawal is under way
            gone = key.deployment is not None and key.deployment.state in GONE
            changes = {"prefix": key.prefix}
            if gone:
                live.revoked_at = now
            live.gateway_state = "expiring"
            live.save(update_fields=["revoked_at", "gateway_state"])
            action, reason = ("apikey.revoke", "Its deployment was deleted.") if gone else ("apikey.expire", "")
            audit(actor="system", action=action, obj=live, tenant=key.tenant, reason=reason, changes=changes)
            withdraw_key_task.delay_on_commit(key.pk)
            ids.append(key.pk)
    return ids + keys_withdraw_lost(now)


# A revoked key's withdrawal normally ends within seconds (withdraw_key_task, retried on cluster
# errors); one still not withdrawn after this long lost its task (a broker restart or restore):
# its gateway Secret may still open the endpoint, so the withdrawal is sent again.
WITHDRAWAL_GRACE = timedelta(minutes=5)


def keys_withdraw_lost(now) -> list[int]:
    """Send the withdrawal again for keys revoked (or expired) more than WITHDRAWAL_GRACE ago whose
    Secret is not yet known to be withdrawn; withdrawing is idempotent. Returns their ids."""
    from access.tasks import withdraw_key_task

    stale = now - WITHDRAWAL_GRACE
    lost = ApiKey.objects.exclude(gateway_state="withdrawn").filter(
        Q(revoked_at__lte=stale) | Q(revoked_at__isnull=True, expires_at__lte=stale, gateway_state="expiring")
    )
    ids = sorted(lost.values_list("pk", flat=True))
    for key_id in ids:
        withdraw_key_task.delay(key_id)
    return ids
