"""The one integer parser (core.params) at every query and form parameter that no serializer or
form field reads: other scripts' digits, superscripts, huge numbers and negatives are a 400 (a
404 for a path segment that names an object), never a 500 and never some other object."""

from __future__ import annotations

import pytest

from core.params import ID_MAX, ParamError, parse_int
from deployments.models import ModelDeployment
from runtime.backends.insight import LOG_LINES_MAX
from tests.support.factories import draft

pytestmark = pytest.mark.django_db

ARABIC_12 = "\u0661\u0662"  # '١٢': str.isdigit() is True and int() reads 12
SUPERSCRIPT_2 = "\u00b2"  # '²': str.isdigit() is True and int() raises
HOSTILE = [ARABIC_12, SUPERSCRIPT_2, "１２", "12abc", " 12", "+12", "1_2", "1e3", "0x1", "12\n", "9" * 5000, "-1"]
HUGE = ["99999999999999999999", str(ID_MAX + 1), "9" * 5000]


def short(value) -> str:
    return ascii(value)[:24]


class TestParser:
    @pytest.mark.parametrize("value", ["0", "7", "-0", str(ID_MAX), "0012"])
    def test_ascii_whole_numbers_within_bounds_are_read(self, value):
        assert parse_int(value, name="n") == int(value)

    @pytest.mark.parametrize("value", [v for v in HOSTILE if v != "-1"], ids=short)
    def test_anything_else_is_refused_naming_the_parameter(self, value):
        with pytest.raises(ParamError) as refused:
            parse_int(value, name="n")
        assert refused.value.field == "n" and refused.value.status_code == 400

    @pytest.mark.parametrize(("value", "message"), [("-1", "At least 0."), (HUGE[0], f"At most {ID_MAX}.")])
    def test_bounds(self, value, message):
        with pytest.raises(ParamError, match=message):
            parse_int(value, name="n")

    def test_a_page_size_is_cut_and_a_missing_value_is_the_default(self):
        assert parse_int("9" * 5000, name="limit", minimum=1, maximum=1000, cut=True) == 1000
        assert parse_int("", name="n", default=5) == parse_int(None, name="n", default=5) == 5


def make_deployment(world) -> ModelDeployment:
    data = draft(world)
    return ModelDeployment.objects.create(tenant=world.alpha, created_by=world.users["member"], **data)


def field_error(response, name: str) -> str:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    return response.json()[name][0]


class TestEndpoints:
    @pytest.mark.parametrize("value", HOSTILE + HUGE, ids=short)
    def test_the_key_list_filter_over_the_api_and_the_page(self, world, value):
        assert field_error(world.client("member").get("/api/v1/keys/", {"deployment": value}), "deployment")
        assert world.browser("member").get("/keys/", {"deployment": value}).status_code == 400

    def test_the_key_list_filter_still_filters(self, world):
        dep = make_deployment(world)
        assert world.client("member").get("/api/v1/keys/", {"deployment": dep.pk}).status_code == 200
        assert world.browser("member").get("/keys/", {"deployment": str(dep.pk)}).status_code == 200

    @pytest.mark.parametrize("value", HOSTILE + HUGE + ["0", str(LOG_LINES_MAX + 1)], ids=short)
    def test_the_logs_panel_lines(self, world, value):
        dep = make_deployment(world)
        assert world.browser("member").get(f"/deployments/{dep.pk}/logs/", {"lines": value}).status_code == 400

    @pytest.mark.parametrize("path", ["/deployments/preview/", "/deployments/profile/"])
    @pytest.mark.parametrize("value", [ARABIC_12, SUPERSCRIPT_2, "-1", HUGE[0], "9" * 5000], ids=short)
    def test_the_form_helpers_deployment_being_edited(self, world, path, value):
        dep = make_deployment(world)
        assert dep.pk != 12 or value != ARABIC_12  # '١٢' must not reach deployment 12 either way
        response = world.browser("member").post(f"{path}?deployment={value}", {"name": "x"})
        assert response.status_code == 400

    @pytest.mark.parametrize("param", ["offset", "limit"])
    @pytest.mark.parametrize("value", [ARABIC_12, SUPERSCRIPT_2, "-1", "12abc", "1e3"], ids=short)
    def test_paging(self, world, param, value):
        assert field_error(world.client("member").get("/api/v1/deployments/", {param: value}), param)

    @pytest.mark.parametrize("value", [ARABIC_12, SUPERSCRIPT_2, "-1", "0", HUGE[0], "9" * 5000], ids=short)
    def test_a_revision_number_in_the_path_is_a_404(self, world, value):
        dep = make_deployment(world)
        dep.revisions.create(number=1, spec={}, gpus=2, proposed_by=world.users["member"])
        response = world.client("member").get(f"/api/v1/deployments/{dep.pk}/revisions/{value}/")
        assert response.status_code == 404, response.content[:200]
        assert world.client("member").get(f"/api/v1/deployments/{dep.pk}/revisions/1/").status_code == 200
