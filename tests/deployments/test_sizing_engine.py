"""The kv_cache_dtype engine option end to end: accepted or refused the same way by the API, the
form and the shared validation; stored with the row and its revision; rendered for vLLM by every
backend (KServe args, Ray Serve LLM engine_kwargs, the local engine's flags) in manifests the CRDs
accept; and sized by the estimate the deployment page shows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deployments import services
from deployments.models import ModelDeployment
from deployments.specs import deployment_spec
from deployments.validation import check_draft
from runtime.backends.local.engine import local_llm_config, vllm_server_args
from runtime.manifests import kserve, render_rayservice
from runtime.manifests.rayservice import llm_config
from runtime.spec import PlatformSpec
from tests.deployments.test_profiles import form_body
from tests.runtime.test_local import make_spec as local_spec
from tests.runtime.test_manifests import small_spec
from tests.support.crd import assert_valid
from tests.support.factories import api_draft, draft

D = "/api/v1/deployments"


class TestRendered:
    def test_auto_is_left_to_vllm_everywhere(self):
        spec = small_spec()
        assert spec.engine.kv_cache_dtype == "auto"
        assert not any(arg.startswith("--kv-cache-dtype") for arg in kserve.vllm_args(spec))
        assert "kv_cache_dtype" not in llm_config(spec)["engine_kwargs"]
        assert "--kv-cache-dtype" not in vllm_server_args(local_llm_config(local_spec()))

    def test_fp8_reaches_each_backend_as_vllm_spells_it(self):
        spec = small_spec()
        spec = replace(spec, engine=replace(spec.engine, kv_cache_dtype="fp8"))
        assert "--kv-cache-dtype=fp8" in kserve.vllm_args(spec)
        assert llm_config(spec)["engine_kwargs"]["kv_cache_dtype"] == "fp8"
        local = local_spec()
        local = replace(local, engine=replace(local.engine, kv_cache_dtype="fp8_e5m2"))
        args = vllm_server_args(local_llm_config(local))
        assert args[args.index("--kv-cache-dtype") + 1] == "fp8_e5m2"

    def test_the_manifests_still_validate_against_the_crds(self):
        spec = small_spec()
        spec = replace(spec, engine=replace(spec.engine, kv_cache_dtype="fp8"))
        assert_valid(render_rayservice(spec, PlatformSpec()))
        assert_valid(kserve.render_inferenceservice(spec, PlatformSpec()))


class TestRefusedAlike:
    @pytest.mark.parametrize("value", ["int3", "FP8", "fp8 ", "turboquant_k8v4", ""])
    def test_the_api_answers_400_on_the_field(self, world, value):
        response = world.client("member").post(f"{D}/", api_draft(world, kv_cache_dtype=value), format="json")
        assert response.status_code == 400, response.content
        assert "kv_cache_dtype" in response.json() and not ModelDeployment.objects.exists()

    def test_the_shared_validation_names_the_field(self, world):
        check = check_draft(draft(world, kv_cache_dtype="int3"), tenant=world.alpha)
        assert list(check.errors) == ["kv_cache_dtype"] and check.memory is None
        assert "fp8_e5m2" in check.errors["kv_cache_dtype"][0]

    def test_the_form_refuses_it_on_the_field(self, world):
        page = world.browser("member").post("/deployments/new/", form_body(world, kv_cache_dtype="int3"))
        assert page.status_code == 200 and "kv_cache_dtype" in page.context["form"].errors
        assert not ModelDeployment.objects.exists()


class TestStoredAndShown:
    def test_the_api_stores_it_and_the_spec_carries_it(self, world):
        response = world.client("member").post(f"{D}/", api_draft(world, kv_cache_dtype="fp8"), format="json")
        assert response.status_code == 201, response.content
        dep = ModelDeployment.objects.get()
        assert response.json()["kv_cache_dtype"] == "fp8" == dep.kv_cache_dtype
        assert deployment_spec(dep).engine.kv_cache_dtype == "fp8"
        assert dep.revisions.get().spec["kv_cache_dtype"] == "fp8"

    def test_a_form_without_the_field_means_auto(self, world):
        body = form_body(world)
        assert "kv_cache_dtype" not in body
        done = world.browser("member").post("/deployments/new/", body)
        assert done.status_code == 302 and ModelDeployment.objects.get().kv_cache_dtype == "auto"

    def test_the_form_stores_fp8(self, world):
        done = world.browser("member").post("/deployments/new/", form_body(world, kv_cache_dtype="fp8"))
        assert done.status_code == 302 and ModelDeployment.objects.get().kv_cache_dtype == "fp8"

    def test_the_estimate_follows_it_and_the_page_shows_both(self, world):
        auto = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
        fp8 = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, name="fp8", kv_cache_dtype="fp8")
        )
        # Meta-Llama-3-8B on an 80 GiB H100 at 0.9: (72 GiB − 8.03e9 × 2 bytes) / bytes a token.
        page = world.browser("member").get(f"/deployments/{auto.pk}/").content.decode()
        assert "KV cache dtype auto" in page and f"about {(72 * 1024**3 - 16_060_000_000) // 131072} tokens" in page
        page = world.browser("member").get(f"/deployments/{fp8.pk}/").content.decode()
        assert "KV cache dtype fp8" in page and f"about {(72 * 1024**3 - 16_060_000_000) // 65536} tokens" in page

    def test_changing_it_needs_approval(self, world):
        from deployments.services.revisions import needs_approval

        assert needs_approval(["kv_cache_dtype"], old_gpus=1, new_gpus=1)
