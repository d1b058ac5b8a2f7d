"""Serving profiles in a real Chromium: choosing one fills the form, every field stays editable,
and the request records the profile with the user's own values."""

from __future__ import annotations

import re

import pytest

from tests.browser.test_portal import expect, fill_request_form, preview

pytestmark = pytest.mark.browser


def test_choosing_a_profile_fills_the_fields_an_edit_is_kept_and_the_request_records_it(portal):
    from deployments.models import ModelDeployment

    member = portal.page("member")
    member.goto("/deployments/new/")
    fill_request_form(member, max_replicas="1")
    expect()(member.get_by_role("button", name="Apply profile")).to_have_count(0)  # the script applies
    member.get_by_label("Serving profile").select_option("throughput")
    expect()(member.get_by_label("Max batched tokens")).to_have_value("16384")
    expect()(member.get_by_label("Quantization")).to_have_value("fp8")
    expect()(member.get_by_label("Max replicas")).to_have_value("4")
    expect()(member.locator("#profile-notes")).to_contain_text("Throughput profile")
    member.get_by_label("Max replicas").fill("2")
    expect()(member.locator('[data-profile-field="max_replicas"]')).to_contain_text("your value kept")
    # Another profile fills everything again; the edit was for the profile chosen before.
    member.get_by_label("Serving profile").select_option("latency")
    expect()(member.get_by_label("Tensor parallel")).to_have_value("2")
    expect()(member.get_by_label("Max batched tokens")).to_have_value("2048")
    member.get_by_label("Max replicas").fill("1")
    expect()(preview(member).locator("[data-fit]")).to_have_attribute("data-fit", "nominal")
    member.get_by_role("button", name="Request deployment").click()
    member.wait_for_url(re.compile(r"/deployments/\d+/$"))
    dep = ModelDeployment.objects.get(name="chat-8b")
    assert (dep.serving_profile, dep.tensor_parallel_size, dep.max_num_batched_tokens) == ("latency", 2, 2048)
    assert dep.max_replicas == 1 and dep.target_ongoing_requests == 8
    expect()(member.locator("#serving-profile")).to_contain_text("Latency")
