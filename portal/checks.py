"""System checks for settings that serve a one-process demo but fail a real deployment (`check --deploy`)."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Tags, Warning, register

# Each web process (and each pod) would keep its own count, and a restart forgets them all;
# the dummy cache keeps nothing at all; the file cache has no atomic increment.
UNSHARED_CACHES = {
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
    "django.core.cache.backends.filebased.FileBasedCache",
}


@register(Tags.security, deploy=True)
def check_sign_in_lockout_cache(app_configs, **kwargs):
    """portal.W001: failed sign-ins are counted in a cache the web processes do not share."""
    if getattr(settings, "AXES_HANDLER", "") != "axes.handlers.cache.AxesCacheHandler":
        return []
    alias = getattr(settings, "AXES_CACHE", "default")
    backend = settings.CACHES.get(alias, {}).get("BACKEND", "")
    if backend not in UNSHARED_CACHES:
        return []
    return [
        Warning(
            f"Failed sign-ins are counted in the {alias!r} cache, a {backend.rsplit('.', 1)[-1]}: not one "
            "count per address that every web process shares and a restart keeps, so an address gets "
            "more guesses than LOGIN_FAILURE_LIMIT.",
            hint="Set CACHE_URL=redis://… (the Redis every web process reaches).",
            id="portal.W001",
        )
    ]
