"""A deployment's task (runtime.tasks): set by the catalog model or the request, the same rule and
message in the form and the API, a change of it (or of the revision) approved like a new model,
the snippets and the Try-it box calling the task's own endpoint."""

from __future__ import annotations

import json

import pytest

from catalog.models import CatalogModel
from deployments import services
from deployments.endpoint import snippets
from deployments.models import ModelDeployment
from tests.deployments.test_picker import form_post
from tests.support.factories import api_draft, draft
from tests.support.http_stubs import base_url, serve

D = "/api/v1/deployments"


@pytest.fixture
def embedder(db) -> CatalogModel:
    return CatalogModel.objects.create(
        name="tiny-embed", display_name="Tiny embedder", source="acme/tiny-embed", revision="v1", task="embedding"
    )


def created(world, **fields) -> ModelDeployment:
    body = {k: v for k, v in api_draft(world, **fields).items() if v is not None}
    response = world.client("member").post(f"{D}/", body, format="json")
    assert response.status_code == 201, response.content
    return ModelDeployment.objects.get(pk=response.json()["id"])


class TestSettingIt:
    def test_a_new_request_without_one_serves_chat(self, world):
        dep = created(world)
        assert dep.task == "chat" and dep.revisions.get(number=1).spec["task"] == "chat"

    def test_the_catalog_model_sets_it_in_the_api_and_the_form(self, world, embedder):
        dep = created(world, catalog_model="tiny-embed", model_source=None, name="api-embed")
        assert (dep.task, dep.model_source, dep.model_revision) == ("embedding", "acme/tiny-embed", "v1")
        page = world.browser("member").post("/deployments/new/", form_post(world, catalog_model="tiny-embed"))
        assert page.status_code == 302, page.context["form"].errors
        assert ModelDeployment.objects.get(name="picked").task == "embedding"

    def test_another_task_than_the_catalog_models_is_the_same_400_in_both(self, world, embedder):
        body = api_draft(world, catalog_model="tiny-embed", task="chat")
        del body["model_source"]
        api = world.client("member").post(f"{D}/", body, format="json")
        assert api.status_code == 400
        assert api.json()["task"] == ["The catalog model tiny-embed sets this to embedding: leave it out."]
        page = world.browser("member").post(
            "/deployments/new/", form_post(world, catalog_model="tiny-embed", task="chat")
        )
        assert list(page.context["form"].errors["task"]) == api.json()["task"]
        assert not ModelDeployment.objects.exists()

    def test_a_free_text_source_takes_the_task_asked_for(self, world):
        assert created(world, task="score", name="scorer").task == "score"
        page = world.browser("member").post(
            "/deployments/new/", form_post(world, model_source="acme/e5", task="embedding")
        )
        assert page.status_code == 302, page.context["form"].errors
        assert ModelDeployment.objects.get(name="picked").task == "embedding"

    @pytest.mark.parametrize("task", ["translate", "", "CHAT", 3, None, ["chat"]])
    def test_anything_else_is_a_400_on_task(self, world, task):
        response = world.client("member").post(f"{D}/", api_draft(world, task=task), format="json")
        assert response.status_code == 400 and list(response.json()) == ["task"], response.content
        assert not ModelDeployment.objects.exists()

    def test_the_form_refuses_it_on_the_field(self, world):
        page = world.browser("member").post("/deployments/new/", form_post(world, model_source="acme/x", task="rerank"))
        assert page.status_code == 200 and "task" in page.context["form"].errors
        assert not ModelDeployment.objects.exists()


@pytest.fixture
def running(world) -> ModelDeployment:
    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=draft(world))
    services.deployment_approve(deployment_id=dep.pk, approver=world.users["platform_admin"], revision=1)
    ModelDeployment.objects.filter(pk=dep.pk).update(state="ready")
    return ModelDeployment.objects.get(pk=dep.pk)


class TestChangingIt:
    @pytest.mark.parametrize(("field", "value"), [("task", "completion"), ("model_revision", "v2")])
    def test_a_change_waits_for_approval_and_what_serves_stays(self, world, running, field, value):
        response = world.client("member").patch(f"{D}/{running.pk}/", {field: value}, format="json")
        assert response.status_code == 200, response.content
        body = response.json()
        assert body["proposed_revision"]["status"] == "proposed", body["proposed_revision"]
        assert body["pending_revision"] == 2 and body[field] == getattr(running, field)
        running.refresh_from_db()
        assert running.serving_revision.number == 1 and getattr(running, field) != value

    def test_the_edit_form_keeps_the_task_when_the_field_is_left_empty(self, world, running):
        ModelDeployment.objects.filter(pk=running.pk).update(task="completion")
        from deployments.forms import DeploymentEditForm

        running.refresh_from_db()
        form = DeploymentEditForm(deployment=running, user=world.users["member"])
        data = {name: form[name].value() for name in form.fields} | {"task": "", "flavor": running.flavor_id}
        data = {k: ("" if v is None else v) for k, v in data.items() if v is not False}
        bound = DeploymentEditForm(data, deployment=running, user=world.users["member"])
        assert bound.is_valid(), bound.errors
        assert bound.cleaned_data["task"] == "completion"


class TestSnippets:
    @pytest.mark.parametrize(
        ("task", "path", "keys"),
        [
            ("chat", "/chat/completions", ["curl", "curl_stream", "python", "python_stream"]),
            ("completion", "/completions", ["curl", "curl_stream", "python", "python_stream"]),
            ("embedding", "/embeddings", ["curl", "python"]),
            ("score", "/score", ["curl", "python_http"]),
        ],
    )
    def test_each_task_calls_its_endpoint(self, world, task, path, keys):
        dep = ModelDeployment(name="x", served_model_name="m", task=task, endpoint_url="http://h/v1", backend="local")
        texts = snippets(dep)
        assert sorted(texts) == sorted([*keys, "note"])
        assert texts["curl"].startswith(f"curl http://h/v1{path} \\\n")
        body = json.loads(texts["curl"].split("-d '", 1)[1].rstrip("'"))
        expected = {
            "chat": {"model": "m", "messages": [{"role": "user", "content": "Hello!"}]},
            "completion": {"model": "m", "prompt": "Hello!"},
            "embedding": {"model": "m", "input": "Hello!"},
            "score": {
                "model": "m",
                "text_1": "What runs models?",
                "text_2": ["GPUs run models.", "Bread is baked in ovens."],
            },
        }[task]
        assert body == expected


def stand_in(answer: dict):
    seen = {}

    def respond(method, path, body):
        seen["path"], seen["body"] = path, json.loads(body)
        return 200, "application/json", json.dumps(answer).encode()

    return serve(respond), seen


class TestTryIt:
    def ready(self, dep, server, task):
        ModelDeployment.objects.filter(pk=dep.pk).update(
            state="ready", task=task, endpoint_url=base_url(server) + "/v1"
        )

    def test_an_embedding_shows_its_size_and_first_values(self, world, running):
        server, seen = stand_in(
            {"data": [{"embedding": [0.5, -0.25] + [0.0] * 62, "index": 0}], "usage": {"prompt_tokens": 3}}
        )
        self.ready(running, server, "embedding")
        page = world.browser("viewer").post(f"/deployments/{running.pk}/try/", {"prompt": "GPUs"}).content.decode()
        api = world.client("viewer").post(f"{D}/{running.pk}/try/", {"prompt": "GPUs"}, format="json")
        server.shutdown()
        assert seen == {"path": "/v1/embeddings", "body": {"model": running.served_model_name, "input": "GPUs"}}
        assert (
            'data-try="ok"' in page and "64 dimensions: [0.5000, -0.2500, 0.0000" in page and "3 prompt tokens" in page
        )
        assert api.status_code == 200 and api.json()["dimensions"] == 64 and api.json()["tokens"] == 3

    def test_scores_come_best_first_and_in_order_in_the_api(self, world, running):
        answer = {"data": [{"index": 0, "score": 0.25}, {"index": 1, "score": 0.75}], "usage": {"prompt_tokens": 9}}
        server, seen = stand_in(answer)
        self.ready(running, server, "score")
        sent = {"prompt": "What runs models?", "documents": "bread\n\n GPUs \n"}
        page = world.browser("member").post(f"/deployments/{running.pk}/try/", sent).content.decode()
        api = world.client("member").post(f"{D}/{running.pk}/try/", sent, format="json")
        server.shutdown()
        assert seen["path"] == "/v1/score"
        assert seen["body"] == {
            "model": running.served_model_name,
            "text_1": "What runs models?",
            "text_2": ["bread", "GPUs"],
        }
        assert "0.7500  GPUs\n0.2500  bread" in page
        assert api.json()["scores"] == [0.25, 0.75]

    def test_a_score_without_documents_is_an_error_before_any_request(self, world, running):
        server, seen = stand_in({})
        self.ready(running, server, "score")
        page = world.browser("member").post(f"/deployments/{running.pk}/try/", {"prompt": "q"}).content.decode()
        api = world.client("member").post(f"{D}/{running.pk}/try/", {"prompt": "q"}, format="json")
        server.shutdown()
        assert 'data-try="error"' in page and "documents" in page and seen == {}
        assert api.status_code == 400 and "one per line" in api.json()["documents"][0]

    def test_only_the_first_documents_are_sent_and_a_long_field_is_refused(self, world, running):
        answer = {"data": [{"index": i, "score": i / 10} for i in range(8)], "usage": {"prompt_tokens": 9}}
        server, seen = stand_in(answer)
        self.ready(running, server, "score")
        lines = "\n".join(f"doc {i}" for i in range(12))
        api = world.client("member").post(f"{D}/{running.pk}/try/", {"prompt": "q", "documents": lines}, format="json")
        sent = seen.pop("body")
        seen.clear()  # what the later requests send, if any
        long = world.client("member").post(f"{D}/{running.pk}/try/", {"prompt": "q", "documents": "x" * 4001})
        page = world.browser("member").post(f"/deployments/{running.pk}/try/", {"prompt": "q", "documents": "x" * 4001})
        server.shutdown()
        assert api.status_code == 200 and sent["text_2"] == [f"doc {i}" for i in range(8)]
        assert long.status_code == 400 and "documents" in long.json() and seen == {}
        assert 'data-try="error"' in page.content.decode() and "4000" in page.content.decode()

    def test_an_answer_of_the_wrong_shape_is_a_readable_error(self, world, running):
        server, _ = stand_in({"choices": [{"text": "hi"}]})
        self.ready(running, server, "embedding")
        page = world.browser("member").post(f"/deployments/{running.pk}/try/", {"prompt": "q"}).content.decode()
        server.shutdown()
        assert "not an OpenAI embedding" in page

    def test_the_page_shows_the_task_and_its_try_fields(self, world, running):
        server, _ = stand_in({})
        self.ready(running, server, "score")
        page = world.browser("viewer").get(f"/deployments/{running.pk}/").content.decode()
        server.shutdown()
        assert 'data-task="score"' in page and 'name="documents"' in page and 'name="max_tokens"' not in page
