"""The request form's fit panel and what it rests on (issue 32, "The form"): every problem at once
(memory, policy and quota never hide one another), "no quota" marks on the hardware, the fit
computed as the edit page loads, the serving profile before the fields it fills, and the price per
hour on the panel, the approvals page and in the API."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from deployments import services
from deployments.forms import DeploymentForm
from deployments.profiles import PROFILE_FIELDS
from deployments.validation import check_draft
from quotas.models import GpuFlavor, Membership, TenantQuota
from tests.support.factories import api_draft, draft

D = "/api/v1/deployments"
BIG = "meta-llama/Meta-Llama-3-70B-Instruct"  # ~131 GiB of weights: no single 24 GiB GPU holds it


@pytest.fixture
def l4(world):
    """Hardware Team Alpha has no quota for (and Team Beta neither)."""
    return GpuFlavor.objects.create(
        name="l4-4",
        gpu_model="L4",
        accelerator_type="L4",
        gpu_memory_gib=24,
        gpus_per_node=4,
        price_per_gpu_hour=Decimal("0.70"),
    )


@pytest.fixture
def dep(world):
    return services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))


def form_data(world, **changes) -> dict:
    data = {k: ("" if v is None else v) for k, v in draft(world).items()}
    data.update(tenant=world.alpha.pk, flavor=world.h100.pk, enable_chunked_prefill="on", profile_applied="")
    for name, value in changes.items():
        data[name] = value.pk if isinstance(value, GpuFlavor) else value
    return data


def problems(page: str) -> list[str]:
    """The fit panel's problem lines, as text."""
    found = re.search(r'<ul class="errorlist" id="fit-problems">(.*?)</ul>', page, re.S)
    assert found, "no problem list on the panel"
    return [re.sub(r"<[^>]+>", "", line).strip() for line in re.findall(r"<li>(.*?)</li>", found.group(1), re.S)]


class TestEveryProblemAtOnce:
    def test_a_memory_problem_does_not_hide_that_the_flavor_has_no_quota(self, world, l4):
        check = check_draft(draft(world, flavor=l4, model_source=BIG, max_replicas=1), tenant=world.alpha)
        assert set(check.errors) == {"tensor_parallel_size", "flavor"}
        assert "more than the" in check.errors["tensor_parallel_size"][0]
        assert check.errors["flavor"] == [
            "Team Alpha has no quota for L4 (l4-4). A tenant admin can request quota for it."
        ]
        assert check.quota.has_quota is False and check.memory.verdict == "does_not_fit"

    def test_the_policy_and_the_quota_each_say_their_own_thing_about_the_same_field(self, world):
        world.alpha.max_gpus_per_deployment = 4
        world.alpha.save()
        check = check_draft(draft(world, max_replicas=13), tenant=world.alpha)
        policy, quota = check.errors["max_replicas"]
        assert "policy allows at most 4 per deployment" in policy
        assert quota.startswith("Does not fit: needs 13 GPUs")

    def test_the_panel_lists_a_refused_field_beside_the_memory_and_quota_problems(self, world, l4):
        body = {**form_data(world, flavor=l4, model_source=BIG, max_replicas=1), "target_ongoing_requests": 0}
        page = world.browser("member").post("/deployments/preview/", body).content.decode()
        lines = problems(page)
        assert len(lines) == 3, lines  # one line each, in the order of the fields on the form
        assert lines[0] == "Hardware: Team Alpha has no quota for L4 (l4-4). A tenant admin can request quota for it."
        assert lines[1].startswith("Tensor parallel: Needs about")
        assert lines[2].startswith("Target ongoing requests: Ensure this value is greater than or equal to")
        assert 'data-memory="does_not_fit"' in page and 'data-fit="no_fit"' in page

    def test_the_api_preview_returns_every_problem_as_field_errors(self, world, l4):
        body = world.client("member").post(
            f"{D}/preview/", api_draft(world, flavor="l4-4", model_source=BIG, max_replicas=1), format="json"
        )
        assert body.status_code == 200
        errors = body.json()["errors"]
        assert body.json()["valid"] is False and set(errors) == {"tensor_parallel_size", "flavor"}
        assert all(isinstance(messages, list) and len(messages) == 1 for messages in errors.values())
        assert "no quota for L4" in errors["flavor"][0]

    def test_a_refused_request_names_every_problem_too(self, world, l4):
        response = world.client("member").post(
            f"{D}/", api_draft(world, flavor="l4-4", model_source=BIG, max_replicas=1), format="json"
        )
        assert response.status_code == 400
        assert {"tensor_parallel_size", "flavor"} <= set(response.json())


class TestNoQuotaMarks:
    def test_the_lookup_counts_a_ceiling_of_zero_as_no_quota(self, world, l4):
        from quotas.services import flavors_with_quota

        assert flavors_with_quota(world.alpha) == {world.h100.pk, world.a100.pk}
        TenantQuota.objects.filter(tenant=world.alpha, flavor=world.a100).update(nominal_gpus=0)
        assert flavors_with_quota(world.alpha) == {world.h100.pk}
        TenantQuota.objects.create(tenant=world.alpha, flavor=l4, nominal_gpus=0, borrowing_limit_gpus=2)
        assert flavors_with_quota(world.alpha) == {world.h100.pk, l4.pk}  # it may borrow
        world.alpha.archived_at = datetime.now(UTC)
        world.alpha.save()
        assert flavors_with_quota(world.alpha) == set()

    def test_the_hardware_without_quota_is_marked_and_stays_selectable(self, world, l4):
        page = world.browser("member").get("/deployments/new/").content.decode()
        assert f'<span class="no-quota" id="quota-mark-{l4.pk}">No quota</span>' in page
        assert f'<span class="no-quota" id="quota-mark-{world.h100.pk}"></span>' in page
        radio = re.search(rf'<input[^>]*value="{l4.pk}"[^>]*>', page).group(0)
        assert "disabled" not in radio

    def test_the_marks_follow_the_tenant_chosen_on_the_form(self, world, l4):
        Membership.objects.create(user=world.users["member"], tenant=world.beta, role="member")
        client = world.browser("member")
        beta = client.post("/deployments/preview/", form_data(world, tenant=world.beta.pk)).content.decode()
        alpha = client.post("/deployments/preview/", form_data(world)).content.decode()
        oob = 'class="no-quota" id="quota-mark-{}" hx-swap-oob="true">{}</span>'
        assert oob.format(world.a100.pk, "No quota") in beta  # beta has H100 quota only
        assert oob.format(world.a100.pk, "") in alpha and oob.format(l4.pk, "No quota") in alpha

    def test_the_api_names_the_flavors_without_quota(self, world, l4):
        member = world.client("member")
        body = member.post(f"{D}/preview/", api_draft(world), format="json").json()
        assert body["flavors_without_quota"] == ["l4-4"]
        quota = member.get("/api/v1/quota-preview/", {"tenant": "alpha", "flavor": "l4-4", "gpus": 1}).json()
        assert quota["has_quota"] is False and quota["fit"] == "no_fit"


class TestThePanelOnLoad:
    def test_the_edit_page_shows_the_fit_of_the_values_it_is_filled_with(self, world, dep):
        page = world.browser("member").get(f"/deployments/{dep.pk}/edit/").content.decode()
        assert "Fill in the model and hardware" not in page
        assert 'data-fit="nominal"' in page and 'data-memory="fits"' in page
        assert 'data-price-per-hour="7.80"' in page
        assert 'id="fit-problems"' not in page

    def test_an_applied_profile_shows_its_fit_too(self, world):
        body = {**form_data(world), "serving_profile": "latency", "apply_profile": "1"}
        page = world.browser("member").post("/deployments/new/", body).content.decode()
        assert "Fill in the model and hardware" not in page and 'data-memory="fits"' in page

    def test_an_empty_request_form_still_asks_for_the_model_and_hardware(self, world):
        page = world.browser("member").get("/deployments/new/").content.decode()
        assert "Fill in the model and hardware to see whether it fits." in page


class TestTheTenantChoice:
    def test_a_member_of_one_tenant_gets_it_without_an_empty_choice_beside_it(self, world):
        page = world.browser("member").get("/deployments/new/").content.decode()
        select = re.search(r'<select name="tenant".*?</select>', page, re.S).group(0)
        assert re.findall(r"<option[^>]*>([^<]*)</option>", select) == ["Team Alpha"]
        Membership.objects.create(user=world.users["member"], tenant=world.beta, role="member")
        page = world.browser("member").get("/deployments/new/").content.decode()
        select = re.search(r'<select name="tenant".*?</select>', page, re.S).group(0)
        assert re.findall(r"<option[^>]*>([^<]*)</option>", select) == ["---------", "Team Alpha", "Team Beta"]


class TestProfileBeforeTheFieldsItFills:
    def test_the_form_and_the_page_put_the_profile_first(self, world, dep):
        names = list(DeploymentForm(user=world.users["member"]).fields)
        assert all(names.index("serving_profile") < names.index(field) for field in PROFILE_FIELDS)
        assert names.index("flavor") < names.index("serving_profile")
        for url in ("/deployments/new/", f"/deployments/{dep.pk}/edit/"):
            page = world.browser("member").get(url).content.decode()
            profile = page.index('name="serving_profile"')
            assert all(profile < page.index(f'name="{field}"') for field in PROFILE_FIELDS), url


class TestPricePerHour:
    def test_the_check_the_panel_and_the_api_preview_price_the_reserved_gpus(self, world):
        check = check_draft(draft(world, max_replicas=2), tenant=world.alpha)
        assert (check.gpus, check.price_per_hour) == (2, Decimal("7.80"))
        page = world.browser("member").post("/deployments/preview/", form_data(world)).content.decode()
        assert "$7.80/h (2 GPUs × $3.90/GPU-h)" in page
        body = world.client("member").post(f"{D}/preview/", api_draft(world), format="json").json()
        assert (body["gpus"], body["price_per_hour"]) == (2, "7.80")

    def test_hardware_without_a_price_says_so(self, world):
        page = world.browser("member").post("/deployments/preview/", form_data(world, flavor=world.a100)).content
        assert "no price per GPU-hour is set for this hardware" in page.decode()
        body = world.client("member").post(f"{D}/preview/", api_draft(world, flavor="a100-pcie"), format="json")
        assert body.json()["price_per_hour"] is None

    def test_each_approvals_row_shows_the_price_per_hour(self, world, dep):
        unpriced = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, name="cheap", flavor=world.a100)
        )
        page = world.browser("platform_admin").get("/approvals/").content.decode()
        assert '<span data-price-per-hour="7.80">$7.80/h</span>' in page
        assert '<span data-price-per-hour="">no GPU-hour price set</span>' in page
        assert unpriced.name in page

    def test_the_api_gives_each_revision_its_price_per_hour(self, world, dep):
        admin = world.client("platform_admin")
        assert admin.get(f"{D}/{dep.pk}/").json()["proposed_revision"]["price_per_hour"] == "7.80"
        assert admin.get(f"{D}/{dep.pk}/revisions/").json()["results"][0]["price_per_hour"] == "7.80"
        assert admin.get(f"{D}/{dep.pk}/revisions/1/").json()["price_per_hour"] == "7.80"

    def test_the_usage_ledger_charges_an_hour_at_the_same_price(self, world):
        from quotas.pricing import price_per_hour
        from usage.ledger import Held, ledger_days

        start = datetime(2026, 3, 2, 10, tzinfo=UTC)
        held = [Held(start, start + timedelta(hours=1), 2, world.h100.price_per_gpu_hour)]
        days = ledger_days(
            held=held,
            transitions=[],
            tokens={},
            start=start,
            end=start + timedelta(days=1),
            now=start + timedelta(days=1),
            tz=UTC,
        )
        assert days[start.date()].cost == price_per_hour(world.h100, 2) == Decimal("7.80")


class TestMarksOnlyForTheCallersTenants:
    def test_another_tenant_posted_on_the_form_gives_no_marks(self, world, l4):
        page = world.browser("member").post("/deployments/preview/", form_data(world, tenant=world.beta.pk))
        marks = re.findall(
            r'<span class="no-quota" id="quota-mark-\d+" hx-swap-oob="true">([^<]*)</span>', page.content.decode()
        )
        assert len(marks) == 3 and set(marks) == {""}  # beta has no A100 or L4 quota: not said to alpha's member

    def test_the_api_preview_of_another_tenant_reads_as_one_that_does_not_exist(self, world, l4):
        member = world.client("member")
        beta = member.post(f"{D}/preview/", api_draft(world, tenant="beta"), format="json")
        missing = member.post(f"{D}/preview/", api_draft(world, tenant="gamma"), format="json")
        assert (beta.status_code, missing.status_code) == (400, 400)
        assert beta.json() == {"tenant": ["No tenant named 'beta' that you can use."]}
        assert missing.json() == {"tenant": ["No tenant named 'gamma' that you can use."]}
