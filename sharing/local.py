"""The local gateway's copy of the active subscriptions (runtime.backends.local.gateway: the
shares file), rewritten whole after every sharing change and by the key sweep, so a missed write
heals on the next one."""

from __future__ import annotations

from django.conf import settings

from runtime.backends import names
from runtime.gateway_local.routes import Limits
from sharing.models import Subscription


def active_shares() -> dict[str, dict[int, Limits]]:
    """consumer slug -> deployment id -> limits, for every active subscription to a local deployment."""
    rows = (
        Subscription.objects.active()
        .filter(publication__deployment__backend__in=names(on_cluster=False))
        .values_list("consumer__slug", "publication__deployment_id", "tokens_per_minute", "requests_per_minute")
    )
    shares: dict[str, dict[int, Limits]] = {}
    for consumer, dep_id, tokens, requests in rows:
        shares.setdefault(consumer, {})[dep_id] = Limits(tokens_per_minute=tokens, requests_per_minute=requests)
    return shares


def sync_local_gateway() -> bool:
    """Hand the local gateway the current shares; False where there is none (no local gateway)."""
    if not settings.LOCAL_GATEWAY:
        return False
    from runtime.backends.local.backend import LocalBackend

    return LocalBackend.instance().share(active_shares())
