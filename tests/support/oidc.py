"""A real OpenID provider for the tests: `oidc-provider` (npm, tests/support/node) on this machine's
Node.js, run by tests/support/oidc/provider.mjs with a config written here.

Skipped with the reason when node or the npm packages are missing; a failure under CI.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SUPPORT = Path(__file__).resolve().parent
SCRIPT = SUPPORT / "oidc" / "provider.mjs"
NODE_MODULES = SUPPORT / "node" / "node_modules"


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class OpenIdProvider:
    """A running provider: its issuer, one confidential client, and accounts a test may change."""

    issuer: str
    client_id: str
    client_secret: str
    accounts_file: Path

    def set_account(self, account_id: str, **claims) -> None:
        """Create or replace an account; the provider reads the file at every lookup."""
        accounts = json.loads(self.accounts_file.read_text())
        accounts[account_id] = claims
        self.accounts_file.write_text(json.dumps(accounts))

    def django_settings(self) -> dict:
        """The portal's OIDC settings for this provider (endpoints as its discovery lists them)."""
        return {
            "OIDC_ENABLED": True,
            "OIDC_RP_CLIENT_ID": self.client_id,
            "OIDC_RP_CLIENT_SECRET": self.client_secret,
            "OIDC_RP_SIGN_ALGO": "RS256",
            "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{self.issuer}/auth",
            "OIDC_OP_TOKEN_ENDPOINT": f"{self.issuer}/token",
            "OIDC_OP_USER_ENDPOINT": f"{self.issuer}/me",
            "OIDC_OP_JWKS_ENDPOINT": f"{self.issuer}/jwks",
            "OIDC_RP_SCOPES": "openid email profile groups",
            "OIDC_USE_PKCE": True,
        }


GROUP_ROLES = {
    "ml-alpha": (("alpha", "member"),),
    "ml-alpha-leads": (("alpha", "tenant_admin"),),
    "ml-beta": (("beta", "viewer"),),
}


def point_the_portal_at(provider: OpenIdProvider, settings) -> None:
    """The portal's settings (pytest-django's `settings`) as with OIDC configured for this
    provider: the backend, the oidc/ URLs, and the provider's groups mapped to tenant roles."""
    for name, value in provider.django_settings().items():
        setattr(settings, name, value)
    settings.AUTHENTICATION_BACKENDS = [
        "axes.backends.AxesStandaloneBackend",
        "portal.oidc.PortalOIDCBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    settings.ROOT_URLCONF = "tests.support.oidc_urls"  # portal.urls plus oidc/ (as with OIDC env set)
    settings.OIDC_GROUP_ROLES = GROUP_ROLES
    settings.OIDC_PLATFORM_ADMIN_GROUPS = ["llm-platform"]


def sign_in_over_http(client, provider: OpenIdProvider, login: str):
    """The whole code flow without a browser: `client` (a Django test client, whose session
    keeps the flow's state, nonce and PKCE verifier) starts it at /oidc/authenticate/; a plain
    HTTP session signs in and consents on the provider's own pages; the portal's callback then
    exchanges the code with the provider (token, userinfo, JWKS) for real. Returns the callback's
    response: a redirect to "/" on success, to the failure URL otherwise. The provider must list
    `http://testserver/oidc/callback/` among the client's redirect URIs."""
    import requests

    response = client.get("/oidc/authenticate/")
    assert response.status_code == 302, response
    browser, url = requests.Session(), response["Location"]
    forms = {"login": {"prompt": "login", "login": login, "password": "any"}, "consent": {"prompt": "consent"}}
    for _ in range(12):
        if url.startswith("http://testserver/"):
            return client.get(url.removeprefix("http://testserver"))
        answer = browser.get(url, allow_redirects=False, timeout=10)
        if answer.is_redirect:
            url = requests.compat.urljoin(url, answer.headers["Location"])
            continue
        form = re.search(
            r'<form[^>]*action="([^"]+)"[^>]*>\s*<input type="hidden" name="prompt" value="(\w+)"', answer.text
        )
        assert form, answer.text[:2000]
        answer = browser.post(requests.compat.urljoin(url, form[1]), data=forms[form[2]], allow_redirects=False)
        url = requests.compat.urljoin(url, answer.headers["Location"])
    raise AssertionError("the provider never redirected back to the portal")


def start_provider(tmp_path: Path, redirect_uris: list[str]):
    """Start the provider; returns (OpenIdProvider, process). The caller stops the process."""
    node = shutil.which("node")
    if node is None:
        _unavailable("node is not installed (Node.js 20+ runs the OpenID provider)")
    if not (NODE_MODULES / "oidc-provider").is_dir():
        _unavailable("npm packages missing: run `npm ci --prefix tests/support/node`")
    port = _free_port()
    provider = OpenIdProvider(
        issuer=f"http://127.0.0.1:{port}",
        client_id="llm-portal",
        client_secret=secrets.token_urlsafe(24),
        accounts_file=tmp_path / "accounts.json",
    )
    provider.accounts_file.write_text("{}")
    config = {
        "issuer": provider.issuer,
        "port": port,
        "cookie_key": secrets.token_urlsafe(24),
        "accounts_file": str(provider.accounts_file),
        "clients": [
            {
                "client_id": provider.client_id,
                "client_secret": provider.client_secret,
                "redirect_uris": redirect_uris,
                "grant_types": ["authorization_code"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "client_secret_post",
            }
        ],
    }
    config_file = tmp_path / "provider.json"
    config_file.write_text(json.dumps(config))
    log = (tmp_path / "provider.log").open("w")
    process = subprocess.Popen([node, str(SCRIPT), str(config_file)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the OpenID provider exited: {(tmp_path / 'provider.log').read_text()}")
        if "READY" in (tmp_path / "provider.log").read_text():
            return provider, process
        time.sleep(0.1)
    process.terminate()
    raise RuntimeError("the OpenID provider did not start within 20 s")


def stop_provider(process) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
