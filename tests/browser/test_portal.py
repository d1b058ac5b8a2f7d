"""The portal in a real Chromium: request → approve → live badge → plotted metrics, quota decisions,
form errors, tenant isolation, keyboard use, and screenshots of every main page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.browser.conftest import screenshot

pytestmark = pytest.mark.browser


def expect():
    from playwright.sync_api import expect as _expect

    return _expect


def fill_request_form(page, *, name="chat-8b", max_replicas="2", tensor_parallel="1"):
    """Fill the new-deployment form as a user would, picking the H100 tile."""
    page.get_by_label("Tenant").select_option(label="Team Alpha")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Model source").fill("meta-llama/Meta-Llama-3-8B-Instruct")
    page.get_by_label("Served model name").fill("llama3-8b")
    page.locator("label.tile", has_text="H100 SXM5").click()
    page.get_by_label("Tensor parallel").fill(tensor_parallel)
    page.get_by_label("Max replicas").fill(max_replicas)
    page.get_by_label("Max model len").fill("8192")


def preview(page):
    return page.locator("#preview")


def create_deployment(world, name="chat-8b"):
    from deployments import services
    from tests.support.factories import draft

    return services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world, name=name))


def store_samples(dep, minutes=10):
    """Raw (15 s) samples over the last `minutes`, shaped like a model warming up under load."""
    from metrics.models import MetricSample, Resolution

    now = timezone.now()
    rows = []
    for i in range(minutes * 4):
        ts = now - timedelta(seconds=15 * (minutes * 4 - i))
        rows.append(
            MetricSample(
                deployment=dep,
                resolution=Resolution.RAW,
                ts=ts,
                prompt_tokens_per_s=round(800 + 37.5 * i, 1),
                generation_tokens_per_s=round(120 + 11.25 * i, 2),
                requests_per_s=round(1.5 + 0.05 * i, 3),
                errors_per_s=0.0,
                kv_cache_pct=round(20 + i * 1.1, 1),
                running=float(4 + i % 5),
                waiting=float(i % 3),
                ttft_p50=0.18,
                ttft_p95=0.42,
                itl_p50=0.021,
                itl_p95=0.035,
                e2e_p50=2.1,
                e2e_p95=4.8,
                prefix_cache_hits=35.0,
                prefix_cache_queries=100.0,
                preemptions_per_s=0.0,
            )
        )
    MetricSample.objects.bulk_create(rows)
    return rows


def trace_y(page, chart: str, name: str) -> list[float]:
    """The y values Plotly holds for one named trace of a chart, as plain numbers."""
    return page.evaluate(
        """([id, name]) => {
            const gd = document.getElementById(id);
            const trace = (gd._fullData || []).find((t) => t.name === name);
            return trace ? Array.from(trace.y) : null;
        }""",
        [f"chart-{chart}", name],
    )


class TestRequestApproveAndWatch:
    def test_member_requests_admin_approves_badge_and_charts_update_live(self, portal):
        from deployments.models import ModelDeployment

        member = portal.page("member")
        member.get_by_role("link", name="New deployment").first.click()
        fill_request_form(member, max_replicas="2")
        expect()(preview(member).locator("[data-fit]")).to_have_attribute("data-fit", "nominal")
        expect()(preview(member).locator("[data-memory]")).to_have_attribute("data-memory", "fits")

        # Ten replicas need 10 of 8 nominal H100s: the fit says it borrows, 13 do not fit at all.
        member.get_by_label("Max replicas").fill("10")
        expect()(preview(member).locator("[data-fit]")).to_have_attribute("data-fit", "borrowing")
        member.get_by_label("Max replicas").fill("13")
        expect()(preview(member)).to_contain_text("Does not fit")
        member.get_by_label("Max replicas").fill("2")
        expect()(preview(member).locator("[data-fit]")).to_have_attribute("data-fit", "nominal")
        screenshot(member, "new-deployment-fit")

        member.get_by_role("button", name="Request deployment").click()
        member.wait_for_url(re.compile(r"/deployments/\d+/$"))
        dep = ModelDeployment.objects.get(name="chat-8b")
        assert dep.state == "pending_approval" and dep.max_replicas == 2 and dep.flavor == portal.world.h100
        status_badge = member.locator("#status [data-state]").first
        expect()(status_badge).to_have_text(re.compile("Pending approval"))
        expect()(member.locator("#actions").get_by_role("button", name="Cancel")).to_be_visible()
        member.evaluate("window.__notReloaded = true")
        expect()(member.locator("#spec-reserved")).to_have_text("0")  # nothing reserved before approval

        admin = portal.page("platform_admin")
        nav_link = admin.get_by_role("navigation", name="Main").get_by_role("link", name=re.compile("Approvals"))
        expect()(nav_link).to_contain_text("1")
        nav_link.click()
        row = admin.locator(f"article[data-deployment='{dep.pk}']")
        expect()(row).to_contain_text("chat-8b")
        screenshot(admin, "approvals")
        row.get_by_role("button", name="Approve").click()
        expect()(admin.locator(".messages")).to_contain_text("Approved")
        expect()(admin.locator(f"article[data-deployment='{dep.pk}']")).to_have_count(0)
        dep.refresh_from_db()
        assert dep.state == "approved" and dep.reserved_gpus == 2

        # The member's page was kept open: the badge changes through the htmx poll alone.
        expect()(status_badge).to_have_attribute("data-state", "approved", timeout=12_000)
        expect()(status_badge).to_have_text(re.compile("Approved"))
        expect()(member.locator("#head-badge [data-state]")).to_have_attribute("data-state", "approved")
        # A pending request can be cancelled, an approved one no longer: the buttons follow the state.
        expect()(member.locator("#actions").get_by_role("button", name="Cancel")).to_have_count(0)
        expect()(member.locator("#actions").get_by_role("button", name="Delete")).to_be_visible()
        expect()(member.locator("#timeline")).to_contain_text("Approved", timeout=12_000)
        expect()(member.locator("#spec-reserved")).to_have_text("2")  # the spec's live values too
        assert member.evaluate("window.__notReloaded") is True

        rows = store_samples(dep)
        # The dashboard redraws every 15 s; picking a range redraws now (still no reload).
        member.get_by_role("button", name="1h").click()
        expect()(member.locator("#chart-note")).to_contain_text(f"{len(rows)} points")
        # plotly.js is fetched only now that there is something to plot.
        expect()(member.locator("#chart-tokens .main-svg").first).to_be_attached(timeout=30_000)
        assert trace_y(member, "tokens", "generation") == [r.generation_tokens_per_s for r in rows]
        assert trace_y(member, "tokens", "prompt") == [r.prompt_tokens_per_s for r in rows]
        # Charts are drawn one after another (metrics.charts.CHARTS order): wait for this one too.
        expect()(member.locator("#chart-kv_cache .main-svg").first).to_be_attached(timeout=30_000)
        kv = member.evaluate("Array.from(document.getElementById('chart-kv_cache')._fullData[0].y)")
        assert kv == [r.kv_cache_pct for r in rows]
        assert member.evaluate("window.__notReloaded") is True
        screenshot(member, "deployment-detail")


class TestQuotaRequestRejected:
    def test_tenant_admin_sees_the_rejection_reason(self, portal):
        from quotas.models import QuotaChangeRequest

        tenant_admin = portal.page("tenant_admin")
        tenant_admin.goto("/quotas/alpha/")
        form = tenant_admin.locator("form", has=tenant_admin.get_by_role("button", name="Request quota"))
        form.get_by_label("Flavor").select_option(value=str(portal.world.h100.pk))
        form.get_by_label("Nominal GPUs").fill("32")
        form.get_by_label("Borrowing limit").fill("0")
        form.get_by_label("Justification").fill("Launch of the support assistant")
        form.get_by_role("button", name="Request quota").click()
        expect()(tenant_admin.locator(".messages")).to_contain_text("Quota change requested")
        qcr = QuotaChangeRequest.objects.get()
        expect()(tenant_admin.locator(f"tr[data-quota-request='{qcr.pk}']")).to_contain_text("Pending")

        admin = portal.page("platform_admin")
        admin.goto("/approvals/")
        row = admin.locator(f"tr[data-quota-request='{qcr.pk}']")
        expect()(row).to_contain_text("Launch of the support assistant")
        row.get_by_label("Comment").fill("Too many H100s this quarter")
        row.get_by_role("button", name="Reject").click()
        expect()(admin.locator(".messages")).to_contain_text("rejected")
        qcr.refresh_from_db()
        assert qcr.status == "rejected"

        tenant_admin.goto("/quotas/alpha/")
        mine = tenant_admin.locator(f"tr[data-quota-request='{qcr.pk}']")
        expect()(mine).to_contain_text("Rejected")
        expect()(mine).to_contain_text("Too many H100s this quarter")
        screenshot(tenant_admin, "quota")


class TestFormErrors:
    def test_bad_input_shows_errors_next_to_fields_keeps_input_creates_nothing(self, portal):
        from deployments.models import ModelDeployment

        member = portal.page("member")
        member.goto("/deployments/new/")
        fill_request_form(member, name="Bad Name!", tensor_parallel="16")
        member.get_by_role("button", name="Request deployment").click()
        member.wait_for_load_state()
        name_field = member.locator(".field", has=member.get_by_label("Name", exact=True))
        tp_field = member.locator(".field", has=member.get_by_label("Tensor parallel"))
        expect()(name_field.locator(".error")).to_contain_text(re.compile("lowercase|DNS", re.I))
        expect()(tp_field.locator(".error")).to_contain_text(re.compile("NVLink|GPUs per node|8", re.I))
        expect()(member.get_by_label("Name", exact=True)).to_have_value("Bad Name!")
        expect()(member.get_by_label("Tensor parallel")).to_have_value("16")
        expect()(member.get_by_label("Model source")).to_have_value("meta-llama/Meta-Llama-3-8B-Instruct")
        expect()(member.locator("#id_flavor_0, input[name=flavor]:checked").last).to_be_checked()
        expect()(member.get_by_label("Name", exact=True)).to_have_attribute("aria-invalid", "true")
        assert not ModelDeployment.objects.exists()
        screenshot(member, "new-deployment-errors")


class TestTenantIsolation:
    def test_another_tenants_member_gets_404_everywhere(self, portal):
        dep = create_deployment(portal.world)
        other = portal.page("other_member")
        for path in (
            f"/deployments/{dep.pk}/",
            f"/deployments/{dep.pk}/status/",
            f"/deployments/{dep.pk}/charts/?window=1h",
            "/quotas/alpha/",
        ):
            response = other.goto(path)
            assert response.status == 404, path
        # Actions are POSTs with the page's CSRF token, as the browser would send them.
        other.goto("/deployments/")
        expect()(other.locator(f"tr[data-deployment='{dep.pk}']")).to_have_count(0)
        token = other.evaluate("JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRFToken']")
        for action in ("cancel", "delete", "approve"):
            response = other.request.post(
                f"/deployments/{dep.pk}/{action}/", headers={"X-CSRFToken": token}, max_redirects=0
            )
            assert response.status == 404, action
        dep.refresh_from_db()
        assert dep.state == "pending_approval"


class TestKeyboard:
    def test_every_input_is_labelled(self, portal):
        member = portal.page("member")
        member.goto("/deployments/new/")
        unlabelled = member.evaluate("""() => Array.from(document.querySelectorAll(
            'input:not([type=hidden]), select, textarea')).filter((el) =>
            el.labels.length === 0 && !el.getAttribute('aria-label')).map((el) => el.name || el.id)""")
        assert unlabelled == []
        names = member.evaluate("""() => Array.from(document.querySelectorAll('input:not([type=hidden])'))
            .map((el) => el.labels[0].textContent.trim())""")
        assert all(names), names

    def test_request_form_with_the_keyboard_only(self, portal):
        from deployments.models import ModelDeployment

        member = portal.page("member")
        member.goto("/deployments/new/")

        def tab_to(selector: str, limit: int = 60) -> None:
            for _ in range(limit):
                member.keyboard.press("Tab")
                if member.evaluate("(s) => document.activeElement.matches(s)", selector):
                    return
            raise AssertionError(f"Tab never reached {selector}")

        tab_to("#id_tenant")
        member.keyboard.press("ArrowDown")  # first real option after the empty one
        tab_to("#id_name")
        member.keyboard.type("kbd-chat")
        tab_to("#id_model_source")
        member.keyboard.type("meta-llama/Meta-Llama-3-8B-Instruct")
        tab_to("input[name=flavor]")  # the first tile (A100); arrows move within the group
        member.keyboard.press("Space")
        member.keyboard.press("ArrowRight")
        assert member.evaluate("document.activeElement.checked && document.activeElement.value") == str(
            portal.world.h100.pk
        )
        focus_ring = member.evaluate("getComputedStyle(document.activeElement.closest('.tile')).outlineStyle")
        assert focus_ring != "none"
        tab_to("#id_max_model_len")
        member.keyboard.type("8192")
        tab_to("button[type=submit]:not(header button)")
        member.keyboard.press("Enter")
        member.wait_for_url(re.compile(r"/deployments/\d+/$"))
        dep = ModelDeployment.objects.get()
        assert (dep.name, dep.tenant, dep.flavor) == ("kbd-chat", portal.world.alpha, portal.world.h100)


class TestScreenshots:
    PAGES = {
        "overview": ("member", "/"),
        "deployment-list": ("member", "/deployments/"),
        "tokens": ("member", "/tokens/"),
        "cluster": ("platform_admin", "/cluster/"),
        "quota-admin": ("platform_admin", "/quotas/alpha/"),
    }

    def test_main_pages_render_without_errors(self, portal):
        dep = create_deployment(portal.world)
        errors: list[str] = []
        pages = {}
        for name, (role, path) in self.PAGES.items():
            if role not in pages:
                pages[role] = portal.page(role)
                pages[role].on("pageerror", lambda exc: errors.append(str(exc)))
                pages[role].on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page = pages[role]
            response = page.goto(path)
            assert response.status == 200, path
            assert page.evaluate("typeof htmx") == "object", f"htmx missing on {path}"
            screenshot(page, name)
        phone = portal.page("member", width=390, height=844)
        phone.goto(f"/deployments/{dep.pk}/")
        expect()(phone.locator("#chart-note")).to_contain_text("No metrics")
        # Nothing to plot: the 4.8 MB chart library is never fetched, and no empty chart boxes show.
        assert phone.evaluate("typeof Plotly") == "undefined"
        expect()(phone.locator("#charts")).to_be_hidden()
        assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        screenshot(phone, "deployment-detail-mobile")
        assert errors == []
