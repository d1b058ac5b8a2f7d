"""Where to send the browser after a form: only ever back into this site."""

from __future__ import annotations

from django.shortcuts import resolve_url
from django.utils.http import url_has_allowed_host_and_scheme


def safe_next(request, default: str, *args, **kwargs) -> str:
    """The POSTed (or queried) `next` when it is a path on this host, else `default` resolved with
    args. Absolute URLs elsewhere, scheme-relative `//evil`, `javascript:` and backslash tricks
    are all refused by Django's own check; an empty or broken value falls back too."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    # Only a path: a bare word would be taken by redirect() for a URL name, a full URL is never needed.
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return resolve_url(default, *args, **kwargs)
