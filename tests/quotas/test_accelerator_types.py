"""A flavor's accelerator type is one of Ray's names (quotas.flavors, runtime.accelerators).

Ray Serve LLM 2.60.0 refuses any other name when it builds the app (`LLMConfig.validate_accelerator_type`,
ray-project/ray python/ray/llm/_internal/serve/core/configs/llm_config.py, tag ray-2.60.0), which the
portal only saw as DEPLOY_FAILED after the GPU workers had started. Saving the flavor refuses it
instead, on the field, in the API and the form alike; a row saved before is flagged, not blocked.
"""

from __future__ import annotations

import pytest

from quotas.models import GpuFlavor

FORM = {
    "name": "l40s",
    "gpu_model": "L40S",
    "accelerator_type": "L40S",
    "gpu_memory_gib": 48,
    "gpus_per_node": 8,
    "cpu_per_gpu": 8,
    "memory_gib_per_gpu": 64,
    "tolerations": "",
    "active": "on",
}
API = {"name": "l40s", "gpu_model": "L40S", "accelerator_type": "L40S", "gpu_memory_gib": 48, "gpus_per_node": 8}
TYPO = "'H10' is not one of Ray's accelerator types; did you mean H100 or H20?"


class TestTheApi:
    def test_an_unknown_name_is_a_400_on_the_field_with_the_closest_names(self, world):
        admin = world.client("platform_admin")
        response = admin.post("/api/v1/flavors/", {**API, "accelerator_type": "H10"}, format="json")
        assert response.status_code == 400, response.content
        assert response.json() == {"accelerator_type": [TYPO], "code": "invalid"}
        assert not GpuFlavor.objects.filter(name="l40s").exists()

    def test_changing_to_another_case_is_refused_as_ray_compares_exactly(self, world):
        before = list(GpuFlavor.objects.filter(name="a100-pcie").values())
        response = world.client("platform_admin").patch(
            "/api/v1/flavors/a100-pcie/", {"accelerator_type": "a100"}, format="json"
        )
        assert response.status_code == 400, response.content
        assert response.json() == {
            "accelerator_type": [
                "'a100' is not one of Ray's accelerator types (Ray matches case exactly); did you mean A100?"
            ],
            "code": "invalid",
        }
        assert list(GpuFlavor.objects.filter(name="a100-pcie").values()) == before

    @pytest.mark.parametrize(
        "name", ["L40S", "A100-80G", "AMD-Instinct-MI300X-OAM", "TPU-V6E", "aws-neuron-core", "A10", "CPU"]
    )
    def test_rays_names_its_alias_and_cpu_are_saved_as_given(self, world, name):
        response = world.client("platform_admin").post(
            "/api/v1/flavors/", {**API, "accelerator_type": name}, format="json"
        )
        assert response.status_code == 201, response.content
        assert GpuFlavor.objects.get(name="l40s").accelerator_type == name


class TestTheForm:
    def test_an_unknown_name_is_a_field_error_and_nothing_is_saved(self, world):
        response = world.browser("platform_admin").post("/platform/flavors/new/", {**FORM, "accelerator_type": "H10"})
        assert response.status_code == 200
        html = response.content.decode()
        assert (
            '<p class="error" role="alert" id="id_accelerator_type_error">'
            "&#x27;H10&#x27; is not one of Ray&#x27;s accelerator types; did you mean H100 or H20?</p>"
        ) in html
        assert not GpuFlavor.objects.filter(name="l40s").exists()

    def test_a_known_name_is_saved(self, world):
        response = world.browser("platform_admin").post("/platform/flavors/new/", {**FORM, "accelerator_type": "L40S"})
        assert response.status_code == 302
        assert GpuFlavor.objects.get(name="l40s").accelerator_type == "L40S"

    def test_it_offers_rays_names_and_describes_the_field(self, world):
        html = world.browser("platform_admin").get("/platform/flavors/new/").content.decode()
        assert 'list="id_accelerator_type_options"' in html
        assert 'aria-describedby="id_accelerator_type_helptext"' in html
        assert '<div class="help" id="id_accelerator_type_helptext">' in html
        datalist = html[html.index('<datalist id="id_accelerator_type_options">') :]
        datalist = datalist[: datalist.index("</datalist>")]
        assert datalist.count("<option") == 63  # Ray 2.60.0's 62 names and CPU
        assert '<option value="H100">' in datalist and '<option value="CPU">' in datalist


class TestASavedUnknownName:
    """A flavor saved before the check (or by hand): flagged where admins look, still editable."""

    @pytest.fixture
    def legacy(self, world):
        GpuFlavor.objects.filter(pk=world.h100.pk).update(accelerator_type="H100-SXM5")
        return GpuFlavor.objects.get(pk=world.h100.pk)

    def test_its_page_and_the_flavor_list_say_so(self, world, legacy):
        browser = world.browser("platform_admin")
        page = browser.get("/platform/flavors/h100-sxm5/").content.decode()
        assert 'id="accelerator-problem"' in page
        assert "&#x27;H100-SXM5&#x27; is not one of Ray&#x27;s accelerator types; did you mean H100" in page
        listing = browser.get("/platform/").content.decode()
        assert listing.count("data-accelerator-problem") == 1
        assert "Ray does not know accelerator type H100-SXM5" in listing

    def test_other_changes_and_retiring_still_work(self, world, legacy):
        admin = world.client("platform_admin")
        response = admin.patch("/api/v1/flavors/h100-sxm5/", {"price_per_gpu_hour": "4.10"}, format="json")
        assert response.status_code == 200, response.content
        assert admin.delete("/api/v1/flavors/h100-sxm5/").status_code == 204
        legacy.refresh_from_db()
        assert not legacy.active and str(legacy.price_per_gpu_hour) == "4.10"

    def test_changing_it_must_give_a_name_ray_knows(self, world, legacy):
        admin = world.client("platform_admin")
        response = admin.patch("/api/v1/flavors/h100-sxm5/", {"accelerator_type": "H100-SXM"}, format="json")
        assert response.status_code == 400
        assert response.json()["accelerator_type"] == [
            "'H100-SXM' is not one of Ray's accelerator types; did you mean H100?"
        ]
        assert admin.patch("/api/v1/flavors/h100-sxm5/", {"accelerator_type": "H100"}, format="json").status_code == 200
        page = world.browser("platform_admin").get("/platform/flavors/h100-sxm5/").content.decode()
        assert 'id="accelerator-problem"' not in page
