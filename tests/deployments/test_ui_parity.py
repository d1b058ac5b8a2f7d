"""What the browser can do the API can do, and back (issue 19): the spec is edited in the UI
through the same service and checks as PATCH; the rendered manifest and Try-it are in the API.
Plus the wording a new user tripped over on these pages."""

from __future__ import annotations

import json

import pytest

from deployments import services
from deployments.models import ModelDeployment
from tests.support.factories import draft
from tests.support.http_stubs import base_url, serve

D = "/api/v1/deployments"


@pytest.fixture
def dep(world):
    return services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))


def form_data(dep, **changes) -> dict:
    data = {
        "model_source": dep.model_source,
        "served_model_name": dep.served_model_name,
        "hf_token_secret": "",
        "flavor": dep.flavor_id,
        "tensor_parallel_size": dep.tensor_parallel_size,
        "pipeline_parallel_size": dep.pipeline_parallel_size,
        "min_replicas": dep.min_replicas,
        "max_replicas": dep.max_replicas,
        "target_ongoing_requests": dep.target_ongoing_requests,
        "max_model_len": dep.max_model_len or "",
        "gpu_memory_utilization": dep.gpu_memory_utilization,
        "enable_chunked_prefill": "on" if dep.enable_chunked_prefill else "",
        "max_num_batched_tokens": dep.max_num_batched_tokens or "",
        "quantization": dep.quantization,
        "dtype": dep.dtype,
        "parameter_count_b": "",
    }
    data.update(changes)
    return data


class TestSpecEditInTheUi:
    def test_the_form_is_prefilled_and_a_change_is_a_new_revision(self, world, dep):
        client = world.browser("member")
        page = client.get(f"/deployments/{dep.pk}/edit/").content.decode()
        assert 'name="max_model_len"' in page and 'value="8192"' in page
        assert 'name="tenant"' not in page and 'name="name"' not in page and 'name="backend"' not in page
        response = client.post(f"/deployments/{dep.pk}/edit/", form_data(dep, max_model_len=4096), follow=True)
        dep.refresh_from_db()
        # Nothing was approved yet: the request itself now reads 4096, as revision 2.
        assert dep.max_model_len == 4096 and dep.generation == 2 and dep.proposed_number == 2
        assert "Revision 2 replaces your request" in response.content.decode()
        assert dep.events.filter(reason="RevisionProposed").count() == 1

    def test_the_same_rules_as_the_api_with_field_labels_and_nothing_written(self, world, dep):
        client = world.browser("member")
        response = client.post(f"/deployments/{dep.pk}/edit/", form_data(dep, min_replicas=3, max_replicas=2))
        page = response.content.decode()
        assert response.status_code == 200 and "Minimum replicas cannot exceed maximum replicas." in page
        dep.refresh_from_db()
        assert dep.min_replicas == 1 and dep.generation == 1
        api = world.client("member").patch(f"{D}/{dep.pk}/", {"min_replicas": 3, "max_replicas": 2})
        assert api.status_code == 400 and "min_replicas" in api.json()

    def test_viewers_and_other_tenants_cannot_edit(self, world, dep):
        assert world.browser("viewer").get(f"/deployments/{dep.pk}/edit/").status_code == 403
        assert world.browser("viewer").post(f"/deployments/{dep.pk}/edit/", form_data(dep)).status_code == 403
        assert world.browser("other_member").get(f"/deployments/{dep.pk}/edit/").status_code == 404
        dep.refresh_from_db()
        assert dep.generation == 1

    def test_the_detail_page_links_the_form_only_for_those_who_may_edit(self, world, dep):
        link = f'href="/deployments/{dep.pk}/edit/"'
        assert link in world.browser("member").get(f"/deployments/{dep.pk}/").content.decode()
        assert link not in world.browser("viewer").get(f"/deployments/{dep.pk}/").content.decode()

    def test_the_live_preview_checks_the_edit_against_the_deployments_own_reservation(self, world, dep):
        response = world.browser("member").post(
            f"/deployments/preview/?deployment={dep.pk}", form_data(dep, max_replicas=3)
        )
        assert response.status_code == 200 and 'data-fit="nominal"' in response.content.decode()
        other = world.browser("other_member").post(f"/deployments/preview/?deployment={dep.pk}", form_data(dep))
        assert other.status_code == 404


class TestManifestAndTryInTheApi:
    def test_manifest_is_what_the_page_shows(self, world, dep):
        body = world.client("viewer").get(f"{D}/{dep.pk}/manifest/").json()
        assert body["title"] == "Rendered manifest" and body["error"] is None
        assert body["object"]["kind"] == "RayService"
        page = world.browser("viewer").get(f"/deployments/{dep.pk}/manifest/").content.decode()
        assert "kind: RayService" in page
        assert world.client("other_member").get(f"{D}/{dep.pk}/manifest/").status_code == 404

    def test_a_local_deployment_shows_the_command_its_engine_runs(self, world, settings, tmp_path):
        settings.LOCAL_MODEL_ROOT = tmp_path
        (tmp_path / "tiny").mkdir()
        local = services.deployment_create(
            tenant=world.alpha,
            user=world.users["member"],
            data=draft(world, name="tiny", backend="local", model_source=str(tmp_path / "tiny")),
        )
        settings.LOCAL_ENGINE = "vllm"
        body = world.client("member").get(f"{D}/{local.pk}/manifest/").json()
        assert body["title"] == "Engine configuration"
        command = body["object"]["command"]
        assert command[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
        assert "--served-model-name" in command and "RayService" not in json.dumps(body)
        page = world.browser("member").get(f"/deployments/{local.pk}/").content.decode()
        assert "Engine configuration" in page and "Rendered manifest" not in page

    def test_try_sends_one_prompt_through_the_portal(self, world, dep):
        seen = {}

        def respond(method, path, body):
            seen["path"], seen["body"] = path, json.loads(body)
            answer = {"choices": [{"text": " Fast."}], "usage": {"completion_tokens": 2}}
            return 200, "application/json", json.dumps(answer).encode()

        server = serve(respond)
        ModelDeployment.objects.filter(pk=dep.pk).update(state="ready", endpoint_url=base_url(server) + "/v1")
        response = world.client("viewer").post(f"{D}/{dep.pk}/try/", {"prompt": "GPUs?", "max_tokens": 4})
        server.shutdown()
        assert response.status_code == 200, response.content
        assert response.json()["text"] == " Fast." and response.json()["tokens"] == 2
        assert seen == {"path": "/v1/completions", "body": {"model": "llama3-8b", "prompt": "GPUs?", "max_tokens": 4}}

    def test_try_refuses_bad_input_and_reports_a_dead_endpoint(self, world, dep):
        client = world.client("member")
        assert client.post(f"{D}/{dep.pk}/try/", {"prompt": "x"}).status_code == 409  # no endpoint yet
        for body in ({}, {"prompt": ""}, {"prompt": "x", "max_tokens": 0}, {"prompt": "x", "max_tokens": 513}):
            assert client.post(f"{D}/{dep.pk}/try/", body).status_code == 400, body
        ModelDeployment.objects.filter(pk=dep.pk).update(state="ready", endpoint_url="http://127.0.0.1:1/v1")
        dead = client.post(f"{D}/{dep.pk}/try/", {"prompt": "x"})
        assert dead.status_code == 502 and "did not answer" in dead.json()["detail"]


class TestWording:
    def test_a_blank_served_name_is_the_deployments_name(self, world):
        dep = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=draft(world, name="plain", served_model_name="")
        )
        assert dep.served_model_name == "plain"
        assert (
            "(served as <code>plain</code>)" in world.browser("member").get(f"/deployments/{dep.pk}/").content.decode()
        )

    def test_errors_name_fields_by_their_labels(self, world):
        data = {k: ("" if v is None else v) for k, v in draft(world, max_replicas=500).items()}
        data.update(flavor=world.h100.pk, tenant=world.alpha.pk, enable_chunked_prefill="on")
        page = world.browser("member").post("/deployments/preview/", data).content.decode()
        assert "<strong>Max replicas</strong>" in page and "<strong>max_replicas</strong>" not in page

    def test_scale_errors_use_labels_too(self, world, dep):
        ModelDeployment.objects.filter(pk=dep.pk).update(state="stopped")
        response = world.browser("member").post(
            f"/deployments/{dep.pk}/scale/", {"min_replicas": 1, "max_replicas": 0}, follow=True
        )
        page = response.content.decode()
        assert "Max replicas: " in page and "max_replicas:" not in page

    def test_one_gpu_per_node_is_singular(self, world):
        from quotas.models import GpuFlavor

        GpuFlavor.objects.create(
            name="l4-1", gpu_model="L4 single", accelerator_type="L4", gpu_memory_gib=24, gpus_per_node=1
        )
        page = world.browser("member").get("/deployments/new/").content.decode()
        assert "1 GPU per node" in page and "1 GPUs" not in page

    def test_a_member_of_one_tenant_has_it_preselected(self, world):
        page = world.browser("member").get("/deployments/new/").content.decode()
        assert f'<option value="{world.alpha.pk}" selected>' in page

    def test_help_texts_carry_the_ids_their_inputs_point_at(self, world):
        import re

        page = world.browser("member").get("/deployments/new/").content.decode()
        pointed = set(re.findall(r'aria-describedby="([^"]+)"', page))
        ids = set(re.findall(r'id="([^"]+)"', page))
        assert pointed and pointed <= ids, pointed - ids


class TestPolicyInTheForm:
    """The tenant's allowed flavors (quotas.policy) shape what the form offers."""

    def test_a_one_tenant_member_is_offered_only_the_flavors_the_policy_allows(self, world):
        world.alpha.allowed_flavors.set([world.h100])
        page = world.browser("member").get("/deployments/new/").content.decode()
        assert f'value="{world.h100.pk}"' in page
        assert f'value="{world.a100.pk}"' not in page

    def test_with_no_allowed_list_every_active_flavor_is_offered(self, world):
        page = world.browser("member").get("/deployments/new/").content.decode()
        assert f'value="{world.h100.pk}"' in page and f'value="{world.a100.pk}"' in page

    def test_the_edit_form_keeps_the_current_flavor_even_when_the_policy_dropped_it(self, world, dep):
        world.alpha.allowed_flavors.set([world.a100])
        page = world.browser("member").get(f"/deployments/{dep.pk}/edit/").content.decode()
        assert f'value="{world.h100.pk}"' in page and f'value="{world.a100.pk}"' in page

    def test_an_archived_tenant_is_not_offered(self, world):
        from django.utils import timezone

        world.alpha.archived_at = timezone.now()
        world.alpha.save(update_fields=["archived_at"])
        page = world.browser("member").get("/deployments/new/").content.decode()
        assert f'<option value="{world.alpha.pk}"' not in page
