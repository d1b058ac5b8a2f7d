"""Every page of the UI, as every role, in Chromium at a laptop width (1366 px) and a phone width
(390 px): no console error, no failed request, nothing wider than the window, and no serious or
critical accessibility violation found by axe-core (from npm, tests/support/node) run inside the
page under the portal's Content-Security-Policy; and no raw identifier in the text a person reads
(a state or choice value such as pending_approval, a field name such as cost_per_mtok, "None", a
"---------" placeholder in a select that offers a single choice).

The page list is generated from the URL configuration (portal.urls), so a page someone adds is
walked without editing this file: every route whose parameters can be filled from the test world
is opened with GET as each role; what answers with a whole HTML document is a page (fragments,
JSON and POST-only routes are not). Error pages (403, 404) are pages too and are checked the same.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import URLPattern, URLResolver
from django.utils import timezone

from tests.browser.conftest import USERNAMES, readme_screenshot
from tests.browser.test_portal import create_deployment, store_samples
from tests.support.world import PASSWORD

pytestmark = pytest.mark.browser

AXE = Path(__file__).resolve().parents[1] / "support" / "node" / "node_modules" / "axe-core" / "axe.min.js"
WIDTHS = tuple(int(w) for w in os.environ.get("WALK_WIDTHS", "1366,390").split(","))  # narrowed when debugging
ROLES = tuple(
    os.environ.get("WALK_ROLES", "anonymous,viewer,member,tenant_admin,other_member,platform_admin").split(",")
)
# Prefixes that are not the UI's pages: the API and its docs (test_csp.py), Django's admin, probes,
# SCIM provisioning (the identity provider's JSON, tests/portal/test_scim.py).
NOT_PAGES = ("api/", "admin/", "oidc/", "scim/", "healthz", "readyz", "metrics", "favicon.ico", "accounts/logout/")
# Runs before any script of each document: records CSP violations (an injected axe must cause none).
RECORD = """
window.__walk = {violations: []};
document.addEventListener("securitypolicyviolation", (e) => {
  window.__walk.violations.push(`${e.effectiveDirective} blocked ${e.blockedURI || "inline"}`);
}, true);
"""

# A raw identifier in visible text: a snake_case word (state and choice values, field names) or
# Python's None as a value (a text that is only "None", or "None" after ":", "=" or "(": not the
# English "None ticked"). Code (<code>, <pre>: model names, resource names, snippets) and inputs
# are not prose; names the world gives things (usernames such as alpha-tenant_admin) are theirs.
RAW_IDENTIFIER = re.compile(r"\b[a-z]+_[a-z_]+\b|^None$|[:=(]\s*None\b")
EMPTY_CHOICE = "---------"
# No request in flight for this long after a document loaded: its scripts' requests are done
# (static/portal/*.js start none on a timer shorter than 15 s).
QUIET_MS = 150
VISIBLE_TEXT = """() => {
  const prose = [];
  const skip = 'code, pre, script, style, template, noscript, textarea, kbd, samp, select';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    const text = node.textContent.trim();
    if (text && el && !el.closest(skip) && el.checkVisibility({visibilityProperty: true})) prose.push(text);
  }
  const selects = Array.from(document.querySelectorAll('select')).filter((s) => s.checkVisibility())
    .map((s) => ({name: s.name || s.id, options: Array.from(s.options).map((o) => o.text.trim())}));
  return {prose, selects};
}"""


def raw_identifiers(page, allowed: tuple[str, ...]) -> list[str]:
    """What a person would read as a raw identifier on the page as it is now (empty: none)."""
    seen = page.evaluate(VISIBLE_TEXT)
    found = []
    for text in seen["prose"] + [o for s in seen["selects"] for o in s["options"]]:
        for name in allowed:
            text = text.replace(name, "")
        found += [f"{m.group(0)!r} in {text[:80]!r}" for m in RAW_IDENTIFIER.finditer(text)]
    for select in seen["selects"]:
        if EMPTY_CHOICE in select["options"] and len(select["options"]) == 2:
            found.append(f"{EMPTY_CHOICE!r} beside the single choice of select {select['name']!r}")
    return sorted(set(found))


def axe_source() -> str:
    if not AXE.exists():
        reason = "axe-core is not installed: npm ci --prefix tests/support/node"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return AXE.read_text()


def routes(patterns=None, prefix: str = "") -> list[str]:
    """Every route of the URL configuration as a string with <converter:name> parameters."""
    from portal import urls

    found = []
    for pattern in urls.urlpatterns if patterns is None else patterns:
        text = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += routes(pattern.url_patterns, text)
        elif isinstance(pattern, URLPattern):
            found.append(text)
    return found


def fill(route: str, values: dict[str, str]) -> str | None:
    """The route with its parameters filled in from `values` (by name, or by the object the route
    is about), or None when one cannot be filled."""
    missing = False

    def value(match: re.Match) -> str:
        nonlocal missing
        name = match.group(2)
        for key in (f"{route.split('/')[0]}:{name}", name):
            if key in values:
                return values[key]
        missing = True
        return ""

    path = "/" + re.sub(r"<(?:(\w+):)?(\w+)>", value, route)
    return None if missing else path


@dataclass
class Walk:
    """Problems found across the walk, by page and role."""

    problems: list[str] = field(default_factory=list)
    pages: set[str] = field(default_factory=set)
    skipped: dict[str, str] = field(default_factory=dict)
    axe_runs: int = 0
    # Names the world gives things, which may hold underscores (alpha-tenant_admin).
    allowed: tuple[str, ...] = tuple(USERNAMES.values())


def check_document(page, url: str, who: str, width: int, walk: Walk, *, run_axe: bool, source: str) -> None:
    where = f"{url} as {who} at {width}px"
    wide = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    if wide[0] > wide[1] + 1:
        culprits = page.evaluate(
            """(limit) => {
                 // The outermost elements that stick out, not inside something that scrolls or clips.
                 const contained = (el) => {
                   for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
                     if (['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(a).overflowX)) return true;
                   }
                   return false;
                 };
                 const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
                   + (typeof el.className === 'string' && el.className ? '.' + el.className.split(' ')[0] : '');
                 return Array.from(document.querySelectorAll('body *'))
                   .filter((el) => el.getBoundingClientRect().right > limit + 1 && !contained(el))
                   .filter((el) => !(el.parentElement && el.parentElement.getBoundingClientRect().right > limit + 1))
                   .slice(0, 4).map((el) => `${name(el)} (${Math.round(el.getBoundingClientRect().right)}px)`);
               }""",
            wide[1],
        )
        walk.problems.append(f"{where}: page is {wide[0]}px wide in a {wide[1]}px window ({', '.join(culprits)})")
    if run_axe:
        page.evaluate(source)
        result = page.evaluate(
            """async () => {
                 const r = await axe.run(document, {resultTypes: ['violations']});
                 const where = (v) => v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ');
                 return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
                   .map((v) => `${v.impact} ${v.id}: ${v.help} (${where(v)})`);
               }"""
        )
        walk.axe_runs += 1
        walk.problems += [f"{where}: axe {v}" for v in result]
    csp = page.evaluate("() => (window.__walk || {violations: ['no recorder']}).violations")
    walk.problems += [f"{where}: CSP {v}" for v in csp]
    walk.problems += [f"{where}: raw identifier {r}" for r in raw_identifiers(page, walk.allowed)]


def open_as(portal, who: str, width: int, walk: Walk):
    """A page signed in as `who` (or anonymous) that reports console errors, page errors and
    failed requests into the walk."""
    context = portal.browser.new_context(viewport={"width": width, "height": 900}, base_url=portal.url)
    context.set_default_timeout(15_000)
    portal.contexts.append(context)
    context.add_init_script(RECORD)
    page = context.new_page()
    state = {"url": "(sign-in)"}

    def console(message) -> None:
        # "Failed to load resource" repeats a 4xx/5xx: the response handler reports those of
        # sub-resources, and a 403/404 document is an answer this walk checks as a page.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            walk.problems.append(f"{state['url']} as {who} at {width}px: console error: {message.text}")

    def response(resp) -> None:
        if resp.status >= 400 and resp.request.resource_type != "document":
            walk.problems.append(f"{state['url']} as {who} at {width}px: {resp.status} {resp.url}")

    page.on("console", console)
    page.on("pageerror", lambda exc: walk.problems.append(f"{state['url']} as {who}: page error: {exc}"))

    def failed(request) -> None:
        # net::ERR_ABORTED is Chromium cancelling what the page still loaded (the favicon, a status
        # poll) because the walk navigated on: not a failure of the page. A refused, blocked or
        # unreachable request fails otherwise (and a 4xx/5xx is a response, checked above).
        if request.failure != "net::ERR_ABORTED":
            walk.problems.append(f"{state['url']} as {who}: failed {request.url} {request.failure}")

    page.on("requestfailed", failed)
    page.on("response", response)
    # What is in flight, for `settle`.
    state["inflight"] = inflight = set()
    page.on("request", lambda request: inflight.add(request))
    page.on("requestfinished", lambda request: inflight.discard(request))
    page.on("requestfailed", lambda request: inflight.discard(request))
    if who != "anonymous":
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(USERNAMES[who])
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{portal.url}/")
    return page, state


def settle(page, state: dict, *, timeout_s: float = 15) -> None:
    """Wait until the page has no request in flight and starts none for QUIET_MS: what Playwright's
    "networkidle" waits for, but that holds a fixed 500 ms of quiet after every document (about
    3 minutes over the walk's page loads). Each quiet period is a timer inside the page, so work
    already queued there (a finished fetch's continuation, which may start the next request: the
    dashboard fetches its figures, then Plotly) runs first and its requests are seen."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if state["inflight"]:
            page.wait_for_timeout(25)
            continue
        page.evaluate("(ms) => new Promise((resolve) => setTimeout(resolve, ms))", QUIET_MS)
        if not state["inflight"]:
            return
    pending = sorted(r.url for r in state["inflight"])
    raise AssertionError(f"{state['url']}: requests still in flight after {timeout_s}s: {pending}")


def seed(portal) -> dict[str, str]:
    """Objects for every kind of page: a deployment with metrics, a pending quota change; the
    values routes' parameters are filled from."""
    from quotas import services as quota_services

    world = portal.world
    dep = create_deployment(world)
    store_samples(dep)
    # Serving revision 1 with revision 2 waiting: the proposed change, the history, the diff, the
    # withdraw confirmation and the approvals page all have something to show.
    serve_and_propose(dep, world)
    quota_services.quota_change_request_create(
        tenant=world.alpha,
        user=world.users["tenant_admin"],
        flavor=world.h100,
        nominal_gpus=12,
        borrowing_limit_gpus=4,
        lending_limit_gpus=None,
        justification="More traffic.",
    )
    from access.services import key_mint

    key_mint(user=world.users["member"], tenant=world.alpha, name="walk", deployment_id=dep.pk)  # a row on /keys/
    from quotas.models import PriorityTier

    tier = PriorityTier.objects.create(name="standard", display_name="Standard", value=100, description="Most work.")
    world.alpha.allowed_tiers.set([tier])  # a row on /platform/tiers/, its edit and delete pages
    return {
        "pk": str(dep.pk),
        "slug": world.alpha.slug,
        "deployments:pk": str(dep.pk),
        "quotas:slug": world.alpha.slug,
        "tier": tier.name,
    }


def serve_and_propose(dep, world) -> None:
    from deployments import services

    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    dep.refresh_from_db()
    services.deployment_observe(
        deployment_id=dep.pk,
        generation=dep.generation,
        state="ready",
        conditions=[{"type": "Ready", "status": "True", "reason": "ServeRunning"}],
        observed_generation=dep.generation,
    )
    services.deployment_update(deployment_id=dep.pk, user=world.users["member"], data={"max_model_len": 4096})


class TestEveryPageAsEveryRole:
    def test_walk(self, portal):
        source = axe_source()
        values = seed(portal)
        candidates = sorted({p for r in routes() if not r.startswith(NOT_PAGES) if (p := fill(r, values))})
        assert "/" in candidates and f"/deployments/{values['pk']}/" in candidates, candidates
        walk = Walk()
        axed: set[tuple[str, int]] = set()
        for width in WIDTHS:
            for who in ROLES:
                page, state = open_as(portal, who, width, walk)
                for url in candidates:
                    state["url"] = url
                    # Asked first without the browser (same cookies): POST-only routes, fragments
                    # and JSON are not pages, and a redirect to sign in is not this role's page.
                    probe = page.request.get(url, max_redirects=0)
                    kind = (probe.headers.get("content-type") or "").split(";")[0]
                    if probe.status in (301, 302):
                        continue
                    if probe.status == 405 or kind != "text/html" or "<main" not in probe.text():
                        walk.skipped[url] = f"{probe.status} {kind or 'no content type'}"
                        continue
                    page.goto(url, wait_until="load")
                    walk.pages.add(url)
                    settle(page, state)
                    # axe at 1366 px for every role; at 390 px once per page (the markup is the same).
                    run_axe = width == WIDTHS[0] or (url, width) not in axed
                    axed.add((url, width))
                    check_document(page, url, who, width, walk, run_axe=run_axe, source=source)
        print(f"walked {len(walk.pages)} pages x {len(ROLES)} roles x {len(WIDTHS)} widths, {walk.axe_runs} axe runs")
        print("not pages:", walk.skipped)
        assert len(walk.pages) >= 8, walk.pages
        assert walk.problems == [], "\n".join(walk.problems)

    def test_axe_runs_under_the_policy_and_finds_what_it_should(self, portal):
        """The check can fail: injected into a page served with the strict policy, axe runs, and on
        a page given an unlabelled input (a critical violation) it reports exactly that."""
        source = axe_source()
        walk = Walk()
        page, state = open_as(portal, "member", 1366, walk)
        response = page.goto("/tokens/")
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.evaluate(source)
        assert page.evaluate("() => typeof axe.run") == "function"
        page.evaluate("() => document.querySelector('main').append(document.createElement('input'))")
        found = page.evaluate(
            "async () => (await axe.run(document, {resultTypes: ['violations']}))"
            ".violations.map((v) => [v.id, v.impact])"
        )
        assert ["label", "critical"] in found, found
        assert page.evaluate("() => window.__walk.violations") == []


class TestRawIdentifierCheck:
    def test_it_finds_raw_identifiers_in_prose_and_leaves_code_and_names_alone(self, portal):
        """The check can fail: a state value in a paragraph, a field name, a "None" cell and a
        "---------" beside a single choice are found; code, hidden text, a username and the
        English "None ticked" are not."""
        walk = Walk()
        page, _ = open_as(portal, "member", 1366, walk)
        page.goto("/tokens/")
        page.evaluate(
            """() => document.querySelector('main').insertAdjacentHTML('beforeend',
                 '<p>Moved to pending_approval by alpha-tenant_admin</p><code>llama_chat_8b</code>'
                 + '<p hidden>cost_per_mtok</p><table><tr><td>None</td><td>None ticked.</td></tr></table>'
                 + '<label>Pick <select name="pick"><option>---------</option><option>Only</option></select></label>'
                 + '<p>Sorted by cost_per_mtok</p>')"""
        )
        assert raw_identifiers(page, tuple(USERNAMES.values())) == [
            "'---------' beside the single choice of select 'pick'",
            "'None' in 'None'",
            "'cost_per_mtok' in 'Sorted by cost_per_mtok'",
            "'pending_approval' in 'Moved to pending_approval by '",
        ]


class TestCopyButtons:
    def test_snippets_copy_to_the_clipboard(self, portal):
        """The Endpoint panel's curl and OpenAI-client snippets name the served model, and their
        Copy buttons put exactly the snippet's text on the clipboard."""
        from deployments.models import ModelDeployment

        dep = create_deployment(portal.world)
        ModelDeployment.objects.filter(pk=dep.pk).update(state="ready", endpoint_url="http://10.0.0.7:8000/v1")
        page = portal.page("viewer", width=1366)
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=portal.url)
        page.goto(f"/deployments/{dep.pk}/")
        for snippet, expected in (
            ("snippet-curl", "curl http://10.0.0.7:8000/v1/chat/completions"),
            ("snippet-python", 'OpenAI(base_url="http://10.0.0.7:8000/v1"'),
        ):
            text = page.locator(f"#{snippet}").inner_text()
            assert expected in text and dep.served_model_name in text, text
            page.locator(f"[data-copy='{snippet}']").click()
            assert page.evaluate("() => navigator.clipboard.readText()") == text
            assert page.locator("#copy-status").inner_text() == "Copied to the clipboard."


class TestReadmeScreenshots:
    def test_main_pages(self, portal):
        """The README's screenshots, taken from the real pages (written to docs/screenshots/ when
        UPDATE_README_SCREENSHOTS=1, else to tests/_artifacts/)."""
        from access.services import key_mint
        from deployments import services
        from deployments.models import DeploymentEvent, ModelDeployment
        from metrics.models import MetricSample
        from quotas import services as quota_services
        from quotas.models import QuotaReservation
        from usage.rollup import refresh_month

        world = portal.world
        dep = create_deployment(world, name="chat-8b")
        services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
        dep.refresh_from_db()
        services.deployment_observe(  # the transition the usage ledger counts serving hours from
            deployment_id=dep.pk,
            generation=dep.generation,
            state="ready",
            conditions=[{"type": "Ready", "status": "True", "reason": "ServeRunning"}],
            observed_generation=dep.generation,
        )
        started = timezone.now() - timedelta(minutes=12)
        since = started.isoformat()
        ModelDeployment.objects.filter(pk=dep.pk).update(
            state="ready",
            status_message="",
            endpoint_url="http://chat-8b.alpha.svc:8000/v1",
            observed_generation=1,
            conditions=[
                {"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": since},
                {"type": "Ready", "status": "True", "reason": "ServeRunning", "lastTransitionTime": since},
            ],
        )
        store_samples(dep)
        # Approved and serving for the 12 minutes the conditions say, and the tokens of its 15 s
        # scrapes (the interval each raw sample covers), for the usage report.
        MetricSample.objects.filter(deployment=dep).update(interval_s=15.0)
        QuotaReservation.objects.filter(owner_type="deployment", owner_id=dep.pk).update(created=started)
        DeploymentEvent.objects.filter(deployment=dep).update(created=started)
        refresh_month(timezone.localdate().replace(day=1))
        key_mint(user=world.users["member"], tenant=world.alpha, name="support-bot", deployment_id=dep.pk)
        create_deployment(world, name="embed-small")  # waiting for approval
        quota_services.quota_change_request_create(
            tenant=world.alpha,
            user=world.users["tenant_admin"],
            flavor=world.h100,
            nominal_gpus=12,
            borrowing_limit_gpus=4,
            lending_limit_gpus=None,
            justification="Launch traffic for the support assistant.",
        )
        member = portal.page("member", width=1366, height=860)
        for name, path, ready in (
            ("overview", "/", "main"),
            ("deployment-detail", f"/deployments/{dep.pk}/", "#chart-tokens .main-svg"),
            ("new-deployment", "/deployments/new/", "#deployment-form"),
            ("usage", "/usage/", "main table"),
            ("keys", "/keys/", "main table"),
        ):
            member.goto(path)
            member.locator(ready).first.wait_for(timeout=60_000)  # plotly.js on a busy host: seconds
            readme_screenshot(member, name)
        admin = portal.page("platform_admin", width=1366, height=860)
        admin.goto("/approvals/")
        readme_screenshot(admin, "approvals")


class TestQuotaFormPrefill:
    def test_choosing_a_flavor_fills_in_its_current_values(self, portal):
        """Asking for a new nominal no longer asks, unseen, for a borrowing limit of 0."""
        from quotas.models import TenantQuota

        world = portal.world
        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.h100).update(nominal_gpus=8, borrowing_limit_gpus=8)
        page = portal.page("tenant_admin")
        page.goto("/quotas/alpha/")
        page.get_by_label("Flavor").select_option(str(world.h100.pk))
        assert page.get_by_role("spinbutton", name="Nominal GPUs").input_value() == "8"
        assert page.get_by_role("spinbutton", name="Borrowing limit").input_value() == "8"
        page.get_by_role("spinbutton", name="Nominal GPUs").fill("10")
        page.get_by_label("Justification").fill("Launch.")
        page.get_by_role("button", name="Request quota").click()
        page.wait_for_url(f"{portal.url}/quotas/alpha/")
        request = world.alpha.quota_requests.get()
        assert (request.nominal_gpus, request.borrowing_limit_gpus) == (10, 8)
