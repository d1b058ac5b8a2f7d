"""Platform administration in a real Chromium.

1. docs/install.md "Install on a cluster", step 6, from an empty database with the browser only:
   the superuser from `createsuperuser` signs in, creates an account in the Django admin, a GPU flavor,
   a tenant with quota and policy, adds the account as a member; the member signs in and requests
   a deployment that the tenant's policy approves.
2. Sign-in through a real OpenID provider (`oidc-provider` on Node.js, tests/support/oidc.py):
   the provider's groups become tenant roles at each sign-in, and go when the group goes.
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command

from tests.browser.conftest import screenshot
from tests.support.oidc import point_the_portal_at, start_provider, stop_provider

pytestmark = pytest.mark.browser
PASSWORD = "a-long-enough-password-42"


def expect():
    from playwright.sync_api import expect as _expect

    return _expect


@pytest.fixture
def empty_portal(live_server, transactional_db, chromium, monkeypatch):
    """The live server over an empty database; reconciles run eagerly in the server thread."""
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)
    contexts = []

    def page(width: int = 1280):
        context = chromium.new_context(viewport={"width": width, "height": 900}, base_url=live_server.url)
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield live_server.url, page
    for context in contexts:
        context.close()


def sign_in(page, username: str, password: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/")


def create_account_in_the_django_admin(page, username: str, email: str) -> None:
    page.goto("/admin/auth/user/add/")
    page.get_by_label("Username").fill(username)
    page.get_by_label(re.compile(r"^Password:?$")).fill(PASSWORD)  # the admin's labels end in ":"
    page.get_by_label("Password confirmation").fill(PASSWORD)
    page.get_by_role("button", name="Save", exact=True).click()
    page.get_by_label("Email address").fill(email)
    page.get_by_role("button", name="Save", exact=True).click()
    expect()(page.locator(".messagelist")).to_contain_text("was changed successfully")


def create_flavor(page) -> None:
    page.goto("/platform/")
    page.get_by_role("link", name="New flavor").click()
    page.get_by_label("Name").fill("l4")
    page.get_by_label("GPU model").fill("NVIDIA L4")
    page.get_by_label("Accelerator type").fill("L4")
    page.get_by_label("GPU memory (GiB)").fill("24")
    page.get_by_label("GPUs per node").fill("4")
    page.get_by_label("Node labels").fill("node.kubernetes.io/instance-type=g6.12xlarge")
    page.get_by_label("Tolerations").fill("nvidia.com/gpu:NoSchedule")
    page.get_by_label("Price per GPU-hour").fill("0.80")
    page.get_by_label("Reason").fill("first GPU pool")
    page.get_by_role("button", name="Create flavor").click()
    expect()(page.locator("tr[data-flavor=l4]")).to_contain_text("node.kubernetes.io/instance-type=g6.12xlarge")


def create_tenant_with_quota_and_policy(page) -> None:
    page.get_by_role("link", name="New tenant").click()
    page.get_by_label("Slug").fill("vision")
    page.get_by_label("Display name").fill("Vision team")
    page.get_by_label("Reason").fill("new team")
    page.get_by_role("button", name="Create tenant").click()
    page.wait_for_url("**/platform/tenants/vision/")
    quota = page.get_by_role("form", name="Set quota")
    quota.get_by_label("GPU flavor").select_option(label="NVIDIA L4 (l4)")
    quota.get_by_label("Nominal GPUs").fill("4")
    quota.get_by_label("Reason").fill("pilot quota")
    quota.get_by_role("button", name="Set quota").click()
    expect()(page.locator(".messages")).to_contain_text("Quota set")
    policy = page.get_by_role("form", name="Request policy")
    policy.get_by_label("Auto-approve up to (GPUs)").fill("2")
    policy.get_by_label("Max GPUs per deployment").fill("4")
    policy.get_by_label("NVIDIA L4 (l4)").check()
    policy.get_by_role("button", name="Save policy").click()
    expect()(page.locator(".messages")).to_contain_text("Policy saved")


def add_member(page, email: str) -> None:
    page.get_by_role("link", name="Members").first.click()
    form = page.get_by_role("form", name="Add a person")
    form.get_by_label("Username or e-mail").fill(email)
    form.get_by_label("Role").select_option("member")
    form.get_by_role("button", name="Add member").click()
    expect()(page.locator("tr[data-member=dana]")).to_contain_text("Member")


def request_deployment(page) -> None:
    page.goto("/deployments/new/")
    page.get_by_label("Tenant").select_option(label="Vision team")
    page.get_by_label("Name", exact=True).fill("chat")
    page.get_by_label("Model source").fill("Qwen/Qwen2.5-7B-Instruct")
    page.locator("label.tile", has_text="NVIDIA L4").click()
    page.get_by_role("button", name="Request deployment").click()
    page.wait_for_url("**/deployments/*/")


def test_from_an_empty_database_a_platform_admin_onboards_a_team_in_the_browser(empty_portal, monkeypatch):
    from core.models import AuditEvent
    from deployments.models import ModelDeployment
    from quotas.models import Tenant

    url, new_page = empty_portal
    assert not Tenant.objects.exists()
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)
    call_command("createsuperuser", interactive=False, username="root", email="root@example.org", verbosity=0)

    admin = new_page()
    sign_in(admin, "root", PASSWORD)
    create_account_in_the_django_admin(admin, "dana", "dana@example.org")
    create_flavor(admin)
    create_tenant_with_quota_and_policy(admin)
    add_member(admin, "dana@example.org")
    screenshot(admin, "platform-members")

    member = new_page()
    sign_in(member, "dana", PASSWORD)
    request_deployment(member)
    expect()(member.locator("body")).to_contain_text("Auto-approved by tenant policy")
    screenshot(member, "platform-auto-approved")

    dep = ModelDeployment.objects.get(name="chat")
    assert (dep.tenant.slug, dep.flavor.name, dep.approved_by, dep.reserved_gpus) == ("vision", "l4", None, 1)
    assert AuditEvent.objects.get(action="deployment.approve", object_id=str(dep.pk)).actor_name == "policy"
    done = set(AuditEvent.objects.filter(actor_name="root").values_list("action", flat=True))
    assert {"flavor.create", "tenant.create", "quota.set", "tenant.policy", "membership.add"} <= done


@pytest.fixture
def provider(live_server, tmp_path, settings):
    """A real OpenID provider whose client redirects to this live server, and the portal's
    settings pointed at it (OIDC on, the provider's groups mapped to tenant roles)."""
    provider, process = start_provider(tmp_path, [f"{live_server.url}/oidc/callback/"])
    point_the_portal_at(provider, settings)
    yield provider
    stop_provider(process)


def sign_in_with_the_provider(portal, login: str):
    """A fresh browser (no session anywhere) signs in through the provider's own pages."""
    page = portal.browser.new_context(base_url=portal.url).new_page()
    portal.contexts.append(page.context)
    page.set_default_timeout(15_000)
    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign in with your organisation").click()
    page.locator("input[name=login]").fill(login)
    page.locator("input[name=password]").fill("any")  # the provider's development sign-in form
    page.get_by_role("button", name="Sign-in").click()
    consent, signed_in = page.get_by_role("button", name="Continue"), page.locator(".who .user")
    expect()(consent.or_(signed_in)).to_be_visible()
    if consent.is_visible():  # the provider asks once per session to share the scopes
        consent.click()
    expect()(signed_in).to_contain_text(login)
    assert page.url == f"{portal.url}/"
    return page


def test_provider_groups_become_tenant_roles_at_each_sign_in(portal, provider):
    from django.contrib.auth.models import User

    from core.models import AuditEvent
    from quotas.models import Membership, Tenant

    gamma = Tenant.objects.create(slug="gamma", display_name="Gamma")
    provider.set_account(
        "dana",
        email="dana@example.org",
        email_verified=True,
        preferred_username="dana",
        groups=["ml-alpha", "ml-beta", "unrelated"],
    )
    sign_in_with_the_provider(portal, "dana")
    roles = dict(Membership.objects.filter(user__username="dana").values_list("tenant__slug", "role"))
    assert roles == {"alpha": "member", "beta": "viewer"}

    # A membership added by hand is the portal's; the groups do not remove it.
    Membership.objects.create(user=User.objects.get(username="dana"), tenant=gamma, role="viewer")
    provider.set_account(
        "dana",
        email="dana@example.org",
        email_verified=True,
        preferred_username="dana",
        groups=["ml-alpha-leads", "llm-platform"],
    )
    again = sign_in_with_the_provider(portal, "dana")
    roles = dict(Membership.objects.filter(user__username="dana").values_list("tenant__slug", "role"))
    assert roles == {"alpha": "tenant_admin", "gamma": "viewer"}
    expect()(again.locator(".who .role")).to_have_text("admin")  # llm-platform: a platform admin now
    changes = [
        (e.tenant.slug if e.tenant else None, json.dumps(e.changes, sort_keys=True))
        for e in AuditEvent.objects.filter(actor_name="identity-provider").order_by("pk")
    ]
    assert [slug for slug, _ in changes] == ["alpha", "beta", "alpha", "beta", None]
