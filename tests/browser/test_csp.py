"""The Content-Security-Policy in a real Chromium: every page of the UI, as the users who see it,
runs under the policy without a single violation (no inline script, handler or style is blocked, so
none is silently missing), and every HTML response carries the policy."""

from __future__ import annotations

import re

import pytest

from tests.browser.test_portal import create_deployment, expect, fill_request_form, store_samples

pytestmark = pytest.mark.browser

# Runs before any script of each document: records every violation the page reports.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(`${e.effectiveDirective} blocked ${e.blockedURI || "inline"}`
    + ` at ${e.sourceFile || document.location.pathname}:${e.lineNumber} ${e.sample || ""}`.trim());
}, true);
"""


class CspWatch:
    """A page that records CSP violations (DOM events and console reports) and page errors."""

    def __init__(self, page):
        self.page = page
        self.problems: list[str] = []
        self.visited: list[str] = []
        page.add_init_script(RECORD_VIOLATIONS)
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))

    def _console(self, message) -> None:
        if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text:
            self.problems.append(f"console: {message.text}")

    def goto(self, path: str):
        """Open `path`; assert it is a 200 HTML page with the policy header."""
        self.collect()
        response = self.page.goto(path)
        assert response.status == 200, path
        policy = response.headers.get("content-security-policy")
        assert policy, f"{path}: no Content-Security-Policy header"
        assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy, f"{path}: {policy}"
        self.visited.append(path)
        return response

    def collect(self) -> None:
        """Move the current document's recorded violations into `problems` (they are dispatched
        asynchronously, so let one task run first)."""
        if not self.visited:
            return
        found = self.page.evaluate(
            "() => new Promise((done) => setTimeout(() => done(window.__cspViolations || ['no recorder']), 100))"
        )
        self.problems.extend(f"{self.page.url}: {v}" for v in found)


def watch(portal, role: str | None) -> CspWatch:
    if role is None:
        context = portal.browser.new_context(base_url=portal.url)
        context.set_default_timeout(10_000)
        portal.contexts.append(context)
        return CspWatch(context.new_page())
    page = portal.page(role)
    return CspWatch(page)


# Redoc CE credits Redocly with a logo it loads from cdn.redoc.ly (hard-coded in the bundle): the
# policy blocks that request, which is the point (the docs make no third-party request), and Redoc
# hides the broken image. The only violation any page may report; test_redoc_loads_nothing_from_a_cdn.
REDOC_LOGO = re.compile(r"^(console: Loading the image |\S+/api/redoc/: img-src blocked )'?https://cdn\.redoc\.ly/")


def assert_clean(*watches: CspWatch) -> None:
    for w in watches:
        w.collect()
    problems = [p for w in watches for p in w.problems if not REDOC_LOGO.match(p)]
    assert problems == [], "\n".join(problems)


class TestNoViolationOnAnyPage:
    def test_every_ui_page_as_its_users(self, portal):
        from quotas.models import TenantQuota

        dep = create_deployment(portal.world)
        store_samples(dep)
        anonymous = watch(portal, None)
        anonymous.goto(portal.login_path)
        expect()(anonymous.page.get_by_label("Username")).to_be_visible()
        anonymous.goto("/admin/login/")  # Django's admin sign-in runs under the same policy
        expect()(anonymous.page.get_by_label("Username")).to_be_visible()

        # 9 of 8 nominal + 4 borrowable H100s reserved: the bar is 8/12 within quota, 1/12 borrowed.
        TenantQuota.objects.filter(tenant=portal.world.alpha, flavor=portal.world.h100).update(reserved_gpus=9)
        member = watch(portal, "member")
        for path in ("/", "/deployments/", "/quotas/", "/quotas/alpha/"):
            member.goto(path)
        # Quota bars are SVG geometry now, not style="width: …": they still draw to scale.
        bar = member.page.locator("[data-flavor='h100-sxm5'] svg.bar").bounding_box()
        used = member.page.locator("[data-flavor='h100-sxm5'] rect.used").bounding_box()
        borrow = member.page.locator("[data-flavor='h100-sxm5'] rect.borrow").bounding_box()
        assert used["width"] == pytest.approx(bar["width"] * 8 / 12, abs=1)
        assert borrow["width"] == pytest.approx(bar["width"] / 12, abs=1)
        assert borrow["x"] == pytest.approx(used["x"] + used["width"], abs=1)
        member.goto("/tokens/")
        member.page.get_by_label("Name", exact=True).fill("ci")
        member.page.get_by_role("button", name="Create token").click()
        expect()(member.page.locator("#new-token")).to_contain_text("llmp_")

        # The form's live preview is an htmx swap; the detail page polls and plots.
        member.goto("/deployments/new/")
        fill_request_form(member.page, name="csp-chat")
        expect()(member.page.locator("#preview [data-fit]")).to_have_attribute("data-fit", "borrowing")
        member.goto(f"/deployments/{dep.pk}/")
        expect()(member.page.locator("#chart-note")).to_contain_text("points")
        expect()(member.page.locator("#chart-tokens .main-svg").first).to_be_attached(timeout=30_000)
        # The pointer can only hover what is in the window (the waiting request's panel sits above).
        member.page.locator("#chart-tokens").scroll_into_view_if_needed()
        box = member.page.locator("#chart-tokens .nsewdrag").first.bounding_box()
        for step in range(1, 6):  # a unified hover label is drawn as the pointer moves over the plot
            member.page.mouse.move(box["x"] + box["width"] * step / 6, box["y"] + box["height"] / 2)
        expect()(member.page.locator("#chart-tokens .hoverlayer > *").first).to_be_attached()
        with member.page.expect_download() as download:  # Plotly's PNG export draws through a blob: image
            member.page.locator("#chart-tokens [data-title='Download plot as a PNG']").click()
        assert download.value.suggested_filename.endswith(".png")
        with member.page.expect_response(re.compile(r"/status/")):  # one htmx poll swaps the status in
            pass
        expect()(member.page.locator("pre", has_text="apiVersion")).to_be_visible()  # hx-trigger="load"

        admin = watch(portal, "platform_admin")
        for path in ("/approvals/", "/cluster/", "/quotas/alpha/", f"/deployments/{dep.pk}/"):
            admin.goto(path)
        admin.goto("/cluster/")
        expect()(admin.page.locator("#quota-chart .main-svg").first).to_be_attached()

        docs = watch(portal, "member")
        docs.goto("/api/docs/")
        expect()(docs.page.locator(".swagger-ui .opblock").first).to_be_visible()
        docs.goto("/api/redoc/")
        expect()(docs.page.locator("#redoc-container h1").first).to_be_visible(timeout=30_000)  # slow on a busy host

        assert_clean(anonymous, member, admin, docs)


class TestInlineHandlersMovedToScripts:
    def test_delete_asks_first_on_a_page_of_its_own(self, portal):
        """Delete asked through a script's dialog (data-confirm); now, like stop and cancel, on a
        confirmation page, which needs no script at all under the strict CSP."""
        from deployments.models import ModelDeployment

        dep = create_deployment(portal.world)
        ModelDeployment.objects.filter(pk=dep.pk).update(state="stopped")
        member = watch(portal, "member")
        member.goto(f"/deployments/{dep.pk}/")
        member.page.locator("#actions").get_by_role("button", name="Delete").click()
        expect()(member.page.get_by_role("heading", name=f"Delete {dep.name}?")).to_be_visible()
        member.page.get_by_role("link", name="Keep it").click()
        expect()(member.page.locator("#actions")).to_be_visible()
        dep.refresh_from_db()
        assert dep.state == "stopped"
        member.page.locator("#actions").get_by_role("button", name="Delete").click()
        member.page.get_by_role("button", name="Yes, delete it").click()
        expect()(member.page.locator(".messages")).to_contain_text("Deleting.")
        dep.refresh_from_db()
        assert dep.state != "stopped"
        assert_clean(member)


class TestApiDocs:
    def test_redoc_loads_nothing_from_a_cdn(self, portal):
        """Swagger UI and Redoc render from the sidecar's files alone: every request the pages make
        is to the portal; Redoc's one hard-coded third-party request (its logo) is blocked."""
        docs = watch(portal, None)
        tried: list[str] = []  # requests to anywhere but the portal (blob: URLs are the page's own)
        docs.page.on("request", lambda r: None if r.url.startswith((portal.url, "blob:")) else tried.append(r.url))
        docs.goto("/api/docs/")
        expect()(docs.page.locator(".swagger-ui .opblock").first).to_be_visible()
        docs.goto("/api/redoc/")
        title = docs.page.locator("#redoc-container h1").first
        expect()(title).to_contain_text("LLM Serving Portal API", timeout=30_000)
        docs.collect()
        assert tried == ["https://cdn.redoc.ly/redoc/logo-mini.svg"]
        # ...and the policy stopped it: the violation is reported, and it is the only one.
        assert len(docs.problems) == 2 and all(REDOC_LOGO.match(p) for p in docs.problems), docs.problems
