"""The API docs (Swagger UI, Redoc) work offline: every asset comes from the pinned
drf-spectacular-sidecar package through the portal's static files, nothing from a CDN, and each page
relaxes the Content-Security-Policy only by what it needs (browser side: tests/browser/test_csp.py)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.urls import resolve

from tests.portal.test_ui import STRICT, inline_code, policy

DOCS = ("/api/docs/", "/api/redoc/")


class References(HTMLParser):
    """Every URL a page loads or links to (src, href), and the nonces on its <script> elements."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.scripts: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.urls += [attrs[name] for name in ("src", "href") if attrs.get(name)]
        if tag == "script":
            self.scripts.append(attrs)


def references(html: str) -> References:
    parser = References()
    parser.feed(html)
    return parser


def static_path(url: str) -> str | None:
    """The path under STATIC_URL, or None for any other URL."""
    return url.removeprefix(settings.STATIC_URL) if url.startswith(settings.STATIC_URL) else None


@pytest.fixture
def anonymous(world):
    return world.browser("anonymous")


@pytest.mark.parametrize("path", DOCS)
def test_docs_pages_reference_no_other_host_and_every_asset_is_a_portal_static_file(anonymous, path):
    response = anonymous.get(path)
    assert response.status_code == 200
    html = response.content.decode()
    urls = references(html).urls
    assert urls, "the page references no asset at all"
    external = [u for u in urls if re.match(r"^(?:[a-z][a-z0-9+.-]*:)?//", u, re.I)]
    assert external == []
    assert not re.search(r"https?://|cdn\.jsdelivr|fonts\.googleapis", html)
    missing = []
    for url in urls:
        asset = static_path(url)
        if asset is None:
            resolve(url.split("?")[0])  # not a static file: a portal URL (raises Resolver404 if not)
        elif finders.find(asset) is None:
            missing.append(url)
    assert missing == []
    # The UI assets themselves: from the sidecar package, not a copy in the portal's static/.
    sidecar = [u for u in urls if "drf_spectacular_sidecar/" in u]
    assert sidecar and all("site-packages" in finders.find(static_path(u)) for u in sidecar)


def test_swagger_ui_gets_its_bundle_css_and_favicon_from_the_sidecar_and_no_validator(anonymous):
    html = anonymous.get("/api/docs/").content.decode()
    urls = references(html).urls
    for name in ("swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "swagger-ui.css", "favicon-32x32.png"):
        assert f"{settings.STATIC_URL}drf_spectacular_sidecar/swagger-ui-dist/{name}" in urls
    # Swagger UI's default would send the schema URL to validator.swagger.io for a badge.
    assert '"validatorUrl": null' in html


def test_redoc_gets_its_bundle_from_the_sidecar(anonymous):
    urls = references(anonymous.get("/api/redoc/").content.decode()).urls
    assert f"{settings.STATIC_URL}drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js" in urls


def test_swagger_page_allows_only_its_own_nonced_init_script(anonymous):
    response = anonymous.get("/api/docs/")
    csp = policy(response)
    nonce = next(s for s in csp["script-src"] if s.startswith("'nonce-"))[len("'nonce-") : -1]
    assert csp == {**STRICT, "script-src": ["'self'", f"'nonce-{nonce}'"]}
    page = references(response.content.decode())
    inline = [s for s in page.scripts if not s.get("src")]
    assert len(inline) == 1 and inline[0].get("nonce") == nonce
    # The nonce is new on every response, so a copied one is worthless.
    assert policy(anonymous.get("/api/docs/"))["script-src"] != csp["script-src"]
    # Apart from that one script, the page is as clean as the UI's.
    assert [f for f in inline_code(response.content.decode()) if "inline <script>" not in f] == []


def test_redoc_page_runs_no_inline_script_and_relaxes_only_its_styles_and_search_worker(anonymous):
    from portal.urls import REDOC_STYLE_HASHES

    response = anonymous.get("/api/redoc/")
    csp = policy(response)
    nonce = next(s for s in csp["style-src"] if s.startswith("'nonce-"))[len("'nonce-") : -1]
    assert csp == {
        **STRICT,
        "style-src": ["'self'", f"'nonce-{nonce}'", *REDOC_STYLE_HASHES],
        "worker-src": ["'self'", "blob:"],
    }
    html = response.content.decode()
    assert inline_code(html) == []
    # Redoc receives the nonce from its start-up script's element and puts it on the styles it makes.
    assert any(s.get("nonce") == nonce and s["src"].endswith("portal/redoc.js") for s in references(html).scripts)


def test_the_rest_of_the_portal_keeps_the_strict_policy(anonymous):
    assert policy(anonymous.get("/accounts/login/")) == STRICT
