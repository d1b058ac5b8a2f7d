"""Every browser page × every role: who gets a page, who is sent to sign in, who gets 403/404; and the
Content-Security-Policy every page is sent with."""

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.conf import settings

from deployments import services
from tests.support.factories import draft
from tests.support.world import ROLES


@pytest.fixture
def dep(world):
    return services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))


def status_of(world, role, url, method="get", data=None):
    client = world.browser(role)
    response = getattr(client, method)(url, data or {})
    return response.status_code


LOGIN = 302  # anonymous users are sent to the sign-in page


def pages(dep):
    return {
        "/": {"anonymous": LOGIN, **{r: 200 for r in ROLES if r != "anonymous"}},
        "/deployments/": {"anonymous": LOGIN, **{r: 200 for r in ROLES if r != "anonymous"}},
        # Viewers look, they do not request: 403 (the page with navigation), not an empty-tenant form.
        "/deployments/new/": {
            "anonymous": LOGIN,
            "viewer": 403,
            **{r: 200 for r in ROLES if r not in ("anonymous", "viewer")},
        },
        f"/deployments/{dep.pk}/edit/": {
            "anonymous": LOGIN,
            "viewer": 403,
            "member": 200,
            "tenant_admin": 200,
            "platform_admin": 200,
            "other_member": 404,
        },
        f"/deployments/{dep.pk}/": {
            "anonymous": LOGIN,
            "viewer": 200,
            "member": 200,
            "tenant_admin": 200,
            "platform_admin": 200,
            "other_member": 404,
        },
        f"/deployments/{dep.pk}/status/": {
            "anonymous": LOGIN,
            "viewer": 200,
            "member": 200,
            "tenant_admin": 200,
            "platform_admin": 200,
            "other_member": 404,
        },
        f"/deployments/{dep.pk}/charts/?window=1h": {
            "anonymous": LOGIN,
            "viewer": 200,
            "member": 200,
            "tenant_admin": 200,
            "platform_admin": 200,
            "other_member": 404,
        },
        f"/deployments/{dep.pk}/manifest/": {
            "anonymous": LOGIN,
            "viewer": 200,
            "member": 200,
            "tenant_admin": 200,
            "platform_admin": 200,
            "other_member": 404,
        },
        "/quotas/alpha/": {
            "anonymous": LOGIN,
            "viewer": 200,
            "member": 200,
            "tenant_admin": 200,
            "platform_admin": 200,
            "other_member": 404,
        },
        "/approvals/": {
            "anonymous": LOGIN,
            "viewer": 403,
            "member": 403,
            "tenant_admin": 403,
            "platform_admin": 200,
            "other_member": 403,
        },
        "/cluster/": {
            "anonymous": LOGIN,
            "viewer": 403,
            "member": 403,
            "tenant_admin": 403,
            "platform_admin": 200,
            "other_member": 403,
        },
        "/tokens/": {"anonymous": LOGIN, **{r: 200 for r in ROLES if r != "anonymous"}},
        f"/deployments/{dep.pk}/revisions/": {
            "anonymous": LOGIN,
            "viewer": 200,
            "member": 200,
            "tenant_admin": 200,
            "platform_admin": 200,
            "other_member": 404,
        },
        f"/deployments/{dep.pk}/revisions/diff/": {
            "anonymous": LOGIN,
            "viewer": 200,
            "member": 200,
            "tenant_admin": 200,
            "platform_admin": 200,
            "other_member": 404,
        },
        # A confirmation page: for those who may cancel this request (it was never approved).
        f"/deployments/{dep.pk}/cancel/": {
            "anonymous": LOGIN,
            "viewer": 403,
            "member": 200,
            "tenant_admin": 200,
            "platform_admin": 200,
            "other_member": 404,
        },
    }


class TestPagePermissions:
    def test_every_page_for_every_role(self, world, dep):
        failures = []
        for url, expected in pages(dep).items():
            for role in ROLES:
                got = status_of(world, role, url)
                if got != expected[role]:
                    failures.append(f"{url} as {role}: {got} != {expected[role]}")
        assert not failures, "\n".join(failures)

    def test_actions_for_other_tenants_are_404_and_viewers_cannot_stop(self, world, dep):
        assert status_of(world, "other_member", f"/deployments/{dep.pk}/cancel/", "post") == 404
        client = world.browser("viewer")
        response = client.post(f"/deployments/{dep.pk}/cancel/", follow=True)
        assert "Only members of the tenant may cancel a deployment." in response.content.decode()
        dep.refresh_from_db()
        assert dep.state == "pending_approval"


class TestDeploymentForm:
    def form_data(self, world, **overrides):
        data = draft(world, **overrides)
        data = {k: ("" if v is None else v) for k, v in data.items()}
        data["flavor"] = world.h100.pk
        data["tenant"] = world.alpha.pk
        data["enable_chunked_prefill"] = "on"
        return data

    def test_bad_input_shows_field_errors_keeps_input_and_creates_nothing(self, world):
        client = world.browser("member")
        response = client.post("/deployments/new/", self.form_data(world, name="Bad Name!", tensor_parallel_size=16))
        body = response.content.decode()
        assert response.status_code == 200
        assert 'value="Bad Name!"' in body
        assert "DNS" in body or "lowercase" in body
        assert "NVLink" in body
        from deployments.models import ModelDeployment

        assert not ModelDeployment.objects.exists()

    def test_a_valid_request_redirects_to_the_detail_page(self, world):
        client = world.browser("member")
        response = client.post("/deployments/new/", self.form_data(world))
        assert response.status_code == 302
        detail = client.get(response["Location"])
        assert "Pending approval" in detail.content.decode()

    def test_live_preview_reports_quota_and_memory_fit(self, world):
        client = world.browser("member")
        body = client.post("/deployments/preview/", self.form_data(world, max_replicas=12)).content.decode()
        assert 'data-fit="borrowing"' in body
        assert 'data-memory="fits"' in body
        body = client.post("/deployments/preview/", self.form_data(world, max_replicas=13)).content.decode()
        assert 'data-fit="no_fit"' not in body or "Does not fit" in body
        assert "Does not fit" in body


class TestApprovalsAndQuotaFlows:
    def test_admin_approves_from_the_inbox(self, world, dep):
        client = world.browser("platform_admin")
        assert dep.name in client.get("/approvals/").content.decode()
        response = client.post("/approvals/", {"deployment": dep.pk, "revision": 1, "decision": "approve"})
        assert response.status_code == 302 and response["Location"] == "/approvals/"
        dep.refresh_from_db()
        assert dep.state == "approved" and dep.serving_revision.number == 1

    def test_an_action_with_next_goes_back_there(self, world, dep):
        response = world.browser("platform_admin").post(
            f"/deployments/{dep.pk}/approve/", {"next": "/approvals/", "revision": 1}
        )
        assert response.status_code == 302 and response["Location"] == "/approvals/"

    def test_quota_request_then_reject_with_reason_is_visible_to_the_tenant_admin(self, world):
        admin_client = world.browser("tenant_admin")
        response = admin_client.post(
            "/quotas/alpha/",
            {"flavor": world.h100.pk, "nominal_gpus": 32, "borrowing_limit_gpus": 0, "justification": "Launch"},
        )
        assert response.status_code == 302
        from quotas.models import QuotaChangeRequest

        qcr = QuotaChangeRequest.objects.get()
        world.browser("platform_admin").post(f"/quota-requests/{qcr.pk}/reject/", {"comment": "Too many H100s"})
        body = admin_client.get("/quotas/alpha/").content.decode()
        assert "Too many H100s" in body and "Rejected" in body

    def test_members_see_no_quota_request_form(self, world):
        body = world.browser("member").get("/quotas/alpha/").content.decode()
        assert "Tenant admins can request" in body


class TestTokensPage:
    def test_create_shows_once_then_revoke(self, world):
        client = world.browser("member")
        body = client.post("/tokens/", {"name": "ci", "expires_in_days": 7}).content.decode()
        assert 'id="new-token"' in body and "llmp_" in body
        assert 'id="new-token"' not in client.get("/tokens/").content.decode()
        from portal.models import ApiToken

        token = ApiToken.objects.get()
        for asked in (
            client.get(f"/tokens/{token.token_key}/revoke/"),
            client.post(f"/tokens/{token.token_key}/revoke/"),
        ):
            assert asked.status_code == 200 and 'name="confirm"' in asked.content.decode()
        assert ApiToken.objects.exists()  # asking changed nothing
        client.post(f"/tokens/{token.token_key}/revoke/", {"confirm": "1"})
        assert not ApiToken.objects.exists()


class TestClusterView:
    def test_admin_view_shows_quota_by_tenant_and_flavor_as_a_plotly_figure(self, world):
        import json
        import re

        body = world.browser("platform_admin").get("/cluster/").content.decode()
        raw = re.search(r'<script id="quota-figure" type="application/json">(.*?)</script>', body, re.S).group(1)
        figure = json.loads(json.loads(raw))
        reserved = next(t for t in figure["data"] if t["name"] == "reserved")
        nominal = next(t for t in figure["data"] if t["name"] == "nominal")
        assert "alpha<br>h100-sxm5" in reserved["x"]  # tenant over flavor: horizontal labels that fit
        assert nominal["y"][reserved["x"].index("alpha<br>h100-sxm5")] == 8


class TestStatusPanel:
    def test_conditions_show_how_long_ago_they_changed_with_the_exact_time_on_hover(self, world, dep):
        from datetime import UTC, datetime, timedelta

        changed = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
        type(dep).objects.filter(pk=dep.pk).update(
            conditions=[
                {"type": "Admitted", "status": "False", "reason": "Pending", "lastTransitionTime": changed},
                {"type": "Ready", "status": "False", "reason": "Odd", "lastTransitionTime": "not a time"},
            ]
        )
        body = world.browser("member").get(f"/deployments/{dep.pk}/status/").content.decode()
        assert f'<time datetime="{changed}" title="{changed}">5\xa0minutes ago</time>' in body
        assert "not a time" in body  # an unparseable value is shown as the cluster wrote it

    def test_the_poll_refreshes_the_live_spec_values_and_the_endpoint_once_the_state_moves(self, world, dep):
        url = "http://tiny-1-serve-svc.alpha.svc:8000/v1"
        type(dep).objects.filter(pk=dep.pk).update(state="ready", endpoint_url=url, generation=2, observed_generation=2)
        client = world.browser("member")
        moved = client.get(f"/deployments/{dep.pk}/status/?shown=provisioning").content.decode()
        assert '<span id="spec-generation" hx-swap-oob="true">2 (observed 2)</span>' in moved
        assert 'id="endpoint-panel" hx-swap-oob="true"' in moved and url in moved and "Try it" in moved
        same = client.get(f"/deployments/{dep.pk}/status/?shown=ready").content.decode()
        assert 'id="spec-reserved" hx-swap-oob="true"' in same and "endpoint-panel" not in same
        page = client.get(f"/deployments/{dep.pk}/").content.decode()
        assert page.count('id="endpoint-panel"') == 1 and "hx-swap-oob" not in page  # the page itself: plain


class TestTryIt:
    def test_a_prompt_goes_through_the_portal_to_the_endpoint(self, world, dep):
        """A stand-in OpenAI server on loopback (the real engine is in the slow local-engine test)."""
        import json

        from tests.support.http_stubs import base_url, serve

        seen = {}

        def respond(method, path, body):
            seen["body"], seen["path"] = json.loads(body), path
            answer = {"choices": [{"text": " GPUs are fast."}], "usage": {"completion_tokens": 4}}
            return 200, "application/json", json.dumps(answer).encode()

        server = serve(respond)
        type(dep).objects.filter(pk=dep.pk).update(state="ready", endpoint_url=base_url(server) + "/v1")
        body = (
            world.browser("viewer")
            .post(f"/deployments/{dep.pk}/try/", {"prompt": "Say something", "max_tokens": 8})
            .content.decode()
        )
        server.shutdown()
        assert 'data-try="ok"' in body and "GPUs are fast." in body
        assert seen["path"] == "/v1/completions" and seen["body"]["max_tokens"] == 8
        assert seen["body"]["model"] == dep.served_model_name

    def test_an_unreachable_endpoint_is_a_readable_error(self, world, dep):
        type(dep).objects.filter(pk=dep.pk).update(state="ready", endpoint_url="http://127.0.0.1:1/v1")
        body = world.browser("member").post(f"/deployments/{dep.pk}/try/", {"prompt": "hi"}).content.decode()
        assert 'data-try="error"' in body and "did not answer" in body
        assert world.browser("other_member").post(f"/deployments/{dep.pk}/try/", {"prompt": "hi"}).status_code == 404


def test_viewers_are_not_offered_the_request_form_in_the_navigation(world):
    assert "/deployments/new/" not in world.browser("viewer").get("/").content.decode()
    assert 'href="/deployments/new/"' in world.browser("member").get("/").content.decode()


# --- Content-Security-Policy: what the server sends (the browser side: tests/browser/test_csp.py) ---


def policy(response) -> dict[str, list[str]]:
    """The Content-Security-Policy header as {directive: [sources]}."""
    header = response.headers.get("Content-Security-Policy")
    assert header, f"no Content-Security-Policy on {response.request['PATH_INFO']}"
    return {name: values for name, *values in (part.split() for part in header.split(";") if part.strip())}


STRICT = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:", "blob:"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}


class InlineCode(HTMLParser):
    """Everything in a page the strict policy would block: inline <script> (JSON data blocks are not
    run and are fine), <style> elements, event-handler and style attributes, hx-on, javascript: URLs."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and not attrs.get("src") and attrs.get("type") != "application/json":
            self.found.append(f"inline <script> at line {self.getpos()[0]}")
        if tag == "style":
            self.found.append(f"<style> at line {self.getpos()[0]}")
        for name, value in attrs.items():
            if name.startswith(("on", "hx-on")) or name == "style":
                self.found.append(f"<{tag} {name}=…> at line {self.getpos()[0]}")
            url = (value or "").strip().lower()
            if name in {"href", "src", "action", "formaction"} and url.startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value}> at line {self.getpos()[0]}")


def inline_code(html: str) -> list[str]:
    parser = InlineCode()
    parser.feed(html)
    return parser.found


class TestContentSecurityPolicy:
    def test_every_page_and_fragment_has_the_strict_policy_and_no_inline_code(self, world, dep):
        from deployments.models import ModelDeployment

        # A stopped deployment offers Delete, whose confirmation used to be an onclick handler.
        stopped = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, name="stopped-one")
        )
        ModelDeployment.objects.filter(pk=stopped.pk).update(state="stopped")
        gets = [url for url, expected in pages(dep).items() if expected["platform_admin"] == 200]
        gets += ["/quotas/", f"/deployments/{dep.pk}/badge/", f"/deployments/{stopped.pk}/"]
        posts = {
            "/deployments/preview/": {"tenant": world.alpha.pk, "max_replicas": 2},
            f"/deployments/{dep.pk}/try/": {"prompt": "hi"},  # not ready: an error fragment
            "/tokens/": {"name": "ci", "expires_in_days": 7},
        }
        failures = []
        for role in ("member", "platform_admin"):
            client = world.browser(role)
            responses = [client.get(url) for url in gets] + [client.post(url, data) for url, data in posts.items()]
            for response in responses:
                url = response.request["PATH_INFO"]
                if response.status_code != 200 or not response["Content-Type"].startswith("text/html"):
                    continue
                if policy(response) != STRICT:
                    failures.append(f"{url} as {role}: {response.headers['Content-Security-Policy']}")
                failures += [f"{url} as {role}: {found}" for found in inline_code(response.content.decode())]
        anonymous = world.browser("anonymous").get("/accounts/login/")
        assert policy(anonymous) == STRICT and inline_code(anonymous.content.decode()) == []
        assert not failures, "\n".join(failures)

    def test_no_template_has_inline_code(self):
        """Every branch of every template, also those the page test does not render."""
        root = Path(settings.BASE_DIR) / "templates"
        found = []
        for path in sorted(root.rglob("*.html")):
            if path.parts[-2] == "drf_spectacular":
                continue  # the docs pages' nonce'd init script: tests/portal/test_docs.py
            text = re.sub(r"{%\s*comment\s*%}.*?{%\s*endcomment\s*%}|{#.*?#}", "", path.read_text(), flags=re.S)
            # Template tags inside a tag (`{% if %}onclick=…{% endif %}`) hide attributes from an HTML
            # parser: read the text with each tag replaced by a space.
            text = re.sub(r"{%.*?%}", " ", text)
            found += [f"{path.relative_to(root)}: {f}" for f in inline_code(text)]
        assert found == []

    def test_the_parser_finds_what_the_policy_blocks(self):
        page = (
            '<script>x()</script><script type="application/json">{}</script><script src="/a.js"></script>'
            '<style>p{}</style><p style="color:red" onclick="x()" hx-on:click="x()"><a href="javascript:x()">'
        )
        assert len(inline_code(page)) == 6


def plotly_js() -> str:
    import plotly

    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()


def plotly_global_rules(source: str) -> list[str]:
    """plotly.js's global style rules as CSS, in the order plotly.js inserts them (each at index 0)."""
    found = re.search(r'=(\{"X,X div":.*?\});for\(\w+ in ', source)
    assert found, 'plotly.min.js no longer holds its style rules as {"X,X div": ...}: see portal/_plotly.html'
    pair = r'(?:"((?:[^"\\]|\\.)*)"|([A-Za-z_$][\w$]*)):(?:\'((?:[^\'\\]|\\.)*)\'|"((?:[^"\\]|\\.)*)")'
    rules = []
    for quoted, bare, single, double in re.findall(pair, found.group(1)):
        selector = re.sub(r"^,", " ,", quoted or bare).replace("X", ".js-plotly-plot .plotly")
        rules.append(f"{selector.replace('Y', '.plotly-notifier')} {{{single or double}}}")
    return rules[::-1]


class TestPlotlyUnderThePolicy:
    def test_plotly_css_holds_exactly_the_rules_plotly_js_would_inject(self):
        """static/portal/plotly.css stands in for the <style> plotly.js may not inject; after a plotly
        upgrade, regenerate it: the file's rules are plotly_global_rules(plotly_js()), one a line."""
        css = (Path(settings.BASE_DIR) / "static" / "portal" / "plotly.css").read_text()
        rules = [line for line in css.splitlines() if line and not line.startswith(("/*", "   "))]
        assert rules == plotly_global_rules(plotly_js())

    def test_the_pages_mark_every_style_plotly_js_would_inject(self):
        from django.template.loader import render_to_string

        source, page = plotly_js(), render_to_string("portal/_plotly.html")
        # Each <style> plotly.js makes is skipped when an element with its id is already there.
        injected = set(re.findall(r'document\.getElementById\("([0-9a-f]{64})"\)', source))
        injected |= {"plotly.js-style-global"} if '"plotly.js-style-"+' in source else set()
        ids = set(re.findall(r'\bid="([^"]+)"', page))
        assert injected and injected <= ids
        assert 'id="plotly.js-style-global" class="no-inline-styles"' in page
