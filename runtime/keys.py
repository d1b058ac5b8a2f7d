"""The portal's API keys as text: the prefix of the keys it mints, the shape every one of its keys
has (so a redactor finds them wherever they stand), and its own key per deployment (Try-it).
Pure: the standard library only, so the local engine's code and the cluster backends can use it."""

from __future__ import annotations

import hashlib
import hmac
import re

MINTED_KEY_PREFIX = "llmp_"  # + secrets.token_urlsafe(32) (access.services)
PORTAL_KEY_PREFIX = "llmp-try-"  # + an HMAC-SHA256 in hex (portal_key)
# Every key the portal mints or derives; 16 characters after the prefix already say "a key"
# (a minted one has 43, a Try-it key 64), so a key cut short at a log's edge is still found.
KEY_SHAPE = re.compile(rf"(?:{re.escape(MINTED_KEY_PREFIX)}|{re.escape(PORTAL_KEY_PREFIX)})[A-Za-z0-9_\-]{{16,}}")


def portal_key(seed: str, deployment_id: int) -> str:
    """The portal's own key for one deployment: derived from the portal's secret (`seed`), so it is
    stored nowhere, never reaches a browser, differs per deployment and changes with the secret."""
    mac = hmac.new(seed.encode(), f"llm-portal try-it {deployment_id}".encode(), hashlib.sha256)
    return PORTAL_KEY_PREFIX + mac.hexdigest()
