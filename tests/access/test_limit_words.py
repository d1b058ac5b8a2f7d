"""The tenant's gateway limits in the words a platform admin sets them with: per key, on each
endpoint, and the streaming rule beside the token limit (runtime.manifests.gateway renders them
so; docs/install.md, step 8 "Endpoint access", says why)."""

from __future__ import annotations

import re
from html import unescape


def helptext(page: str, field: str) -> str:
    found = re.search(rf'<div class="help" id="id_policy-{field}_helptext">(.*?)</div>', page, re.S)
    assert found, f"no help text for {field}"
    return unescape(found.group(1))


def test_the_policy_form_says_per_key_and_warns_about_streams_next_to_the_token_limit(world):
    page = world.browser("platform_admin").get("/platform/tenants/alpha/").content.decode()
    tokens, requests = helptext(page, "tokens_per_minute"), helptext(page, "requests_per_minute")
    assert tokens.startswith("Per API key, on each endpoint") and "token usage each response reports" in tokens
    assert "A streamed response counts only if the client asks for usage in the stream" in tokens
    assert "'include usage'" in tokens  # the option's name in words (the walk refuses raw identifiers)
    assert requests.startswith("Per API key, on each endpoint") and "streamed requests" in requests
    # The input points at its help text, so a screen reader reads the warning with the field.
    assert 'aria-describedby="id_policy-tokens_per_minute_helptext"' in page
