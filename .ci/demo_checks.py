"""What .ci/demo-smoke checks against a running demo: python demo_checks.py BASE_URL plain|local.

Signs in through the login form as the demo's member, reads the pages a new user reads first, the
error pages (the portal's own, with navigation: DEBUG is off), the static files (hashed names,
compressed, cached for a year) and, with the local engine, waits for the tiny model to serve and
sends it one prompt through the portal's API (the detail page's Try-it).
"""

from __future__ import annotations

import re
import sys
import time

import requests

BASE, MODE = sys.argv[1].rstrip("/"), sys.argv[2]
PASSWORD = "demo-password-123"
ENGINE_WAIT_S = 900  # vLLM's CPU build compiles its kernels on first start: minutes on two cores


def sign_in(username: str) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{BASE}/accounts/login/", timeout=10)
    page.raise_for_status()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    landed = session.post(
        f"{BASE}/accounts/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Referer": page.url},
        timeout=10,
    )
    assert landed.url.rstrip("/") == BASE, f"sign-in as {username} did not land on the overview: {landed.url}"
    return session


def check_pages(member: requests.Session) -> requests.Response:
    listing = member.get(f"{BASE}/deployments/", timeout=10)
    assert listing.status_code == 200 and "llama" in listing.text.lower(), listing.status_code
    assert "Content-Security-Policy" in listing.headers
    docs = member.get(f"{BASE}/api/docs/", timeout=10)
    assert docs.status_code == 200 and "cdn" not in docs.text.lower(), docs.status_code
    rows = member.get(f"{BASE}/api/v1/deployments/", timeout=10).json()["results"]
    detail = member.get(f"{BASE}/deployments/{rows[0]['id']}/", timeout=10)
    assert detail.status_code == 200, detail.status_code
    return detail


def check_error_pages(member: requests.Session) -> None:
    """DEBUG is off: no yellow page, no bare 403; the portal's page with its navigation."""
    missing = member.get(f"{BASE}/deployments/987654/", timeout=10)
    assert missing.status_code == 404, missing.status_code
    assert "Page not found" in missing.text and 'aria-label="Main"' in missing.text, missing.text[:500]
    assert "URLconf" not in missing.text and "Traceback" not in missing.text
    refused = member.get(f"{BASE}/approvals/", timeout=10)
    assert refused.status_code == 403, refused.status_code
    assert "Not allowed" in refused.text and 'aria-label="Main"' in refused.text, refused.text[:500]


def check_static(detail: requests.Response) -> None:
    """Hashed names from the manifest, served compressed with a year-long cache lifetime."""
    css = re.search(r'href="(/static/portal/portal\.[0-9a-f]{12}\.css)"', detail.text)
    plotly = re.search(r'data-plotly-src="(/static/plotly/plotly\.min\.[0-9a-f]{12}\.js)"', detail.text)
    assert css and plotly, "static URLs without a content hash: is the manifest storage on?"
    head = detail.text.split("</head>", 1)[0]
    assert not re.search(r"<script[^>]+plotly", head), "plotly.js is loaded in <head>: it should wait for data"
    for path in (css.group(1), plotly.group(1)):
        response = requests.get(f"{BASE}{path}", headers={"Accept-Encoding": "gzip, br"}, timeout=30, stream=True)
        assert response.status_code == 200, (path, response.status_code)
        assert response.headers.get("Content-Encoding") in ("gzip", "br"), (path, response.headers)
        assert "max-age=315360000" in response.headers.get("Cache-Control", ""), (path, response.headers)
        response.close()


def check_first_completion(member: requests.Session) -> None:
    """The demo's local tiny model becomes ready, and one prompt through the portal answers."""
    deadline, state = time.monotonic() + ENGINE_WAIT_S, None
    while time.monotonic() < deadline:
        rows = member.get(f"{BASE}/api/v1/deployments/", params={"backend": "local"}, timeout=10).json()["results"]
        dep = next((r for r in rows if r["name"] == "tiny-llama-local"), None)
        assert dep is not None, "LOCAL_ENGINE=1 demo has no tiny-llama-local deployment"
        state = dep["state"]
        if state == "ready":
            break
        assert state not in ("failed", "rejected"), f"tiny-llama-local is {state}"
        time.sleep(5)
    assert state == "ready", f"tiny-llama-local still {state} after {ENGINE_WAIT_S} s"
    answer = member.post(
        f"{BASE}/api/v1/deployments/{dep['id']}/try/",
        json={"prompt": "Hello", "max_tokens": 8},
        headers={"X-CSRFToken": member.cookies["csrftoken"], "Referer": f"{BASE}/"},
        timeout=120,
    )
    assert answer.status_code == 200, (answer.status_code, answer.text[:500])
    body = answer.json()
    assert body["tokens"] and body["latency_ms"] > 0, body
    print(f"demo smoke: first completion through the portal, {body['tokens']} tokens in {body['latency_ms']} ms")


member = sign_in("search-member")
detail = check_pages(member)
check_error_pages(member)
check_static(detail)
if MODE == "local":
    check_first_completion(member)
print(f"demo smoke ({MODE}): signed in, pages, error pages, compressed hashed static files")
