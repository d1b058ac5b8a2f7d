"""The portal's own API key per deployment (Try-it). Pure: the standard library only, so the local
engine's code and the cluster backends can both use it."""

from __future__ import annotations

import hashlib
import hmac

PORTAL_KEY_PREFIX = "llmp-try-"


def portal_key(seed: str, deployment_id: int) -> str:
    """The portal's own key for one deployment: derived from the portal's secret (`seed`), so it is
    stored nowhere, never reaches a browser, differs per deployment and changes with the secret."""
    mac = hmac.new(seed.encode(), f"llm-portal try-it {deployment_id}".encode(), hashlib.sha256)
    return PORTAL_KEY_PREFIX + mac.hexdigest()
