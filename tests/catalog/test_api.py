"""The catalog over the API: who reads and who writes (every role), filters, and importing facts
from a model directory generated on the spot (never a hub, a bucket or a claim)."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalog.models import CatalogModel
from core.models import AuditEvent
from deployments.management.commands.make_tiny_model import MODEL_SHAPE
from tests.catalog.conftest import COMMIT
from tests.support.model_dirs import write_config, write_safetensors
from tests.support.world import check_matrix

URL = "/api/v1/catalog/models/"
BODY = {"name": "qwen-7b", "display_name": "Qwen 7B", "source": "Qwen/Qwen2.5-7B-Instruct", "revision": "main"}
EVERYONE = dict(viewer=200, member=200, tenant_admin=200, platform_admin=200, other_member=200)


def expect(**codes):
    return {"anonymous": 401} | codes


class TestRoles:
    def test_every_signed_in_user_lists_and_reads_active_models(self, world, llama):
        check_matrix(world, lambda c: c.get(URL), expect(**EVERYONE))
        check_matrix(world, lambda c: c.get(f"{URL}{llama.name}/"), expect(**EVERYONE))

    def test_only_platform_admins_create(self, world):
        codes = dict(viewer=403, member=403, tenant_admin=403, other_member=403, platform_admin=(201, 409))
        check_matrix(world, lambda c: c.post(URL, BODY), expect(**codes))
        assert CatalogModel.objects.get().created_by == world.users["platform_admin"]

    def test_a_tenant_member_cannot_change_deactivate_or_import(self, world, llama):
        for role in ("viewer", "member", "tenant_admin", "other_member"):
            client = world.client(role)
            assert client.patch(f"{URL}{llama.name}/", {"licence": "x"}).status_code == 403
            assert client.post(f"{URL}{llama.name}/deactivate/").status_code == 403
            assert client.post(f"{URL}{llama.name}/import-facts/", {"path": "/x"}).status_code == 403
        llama.refresh_from_db()
        assert llama.licence == "" and llama.active
        assert not AuditEvent.objects.filter(object_type="catalog.catalogmodel").exists()

    def test_an_inactive_model_is_hidden_from_users_and_shown_to_admins(self, world, llama):
        admin = world.client("platform_admin")
        assert admin.post(f"{URL}{llama.name}/deactivate/", {"reason": "superseded"}).status_code == 200
        assert world.client("member").get(f"{URL}{llama.name}/").status_code == 404
        assert [r["name"] for r in world.client("member").get(URL).json()["results"]] == []
        assert admin.get(f"{URL}{llama.name}/").json()["active"] is False
        assert admin.post(f"{URL}{llama.name}/deactivate/").status_code == 409
        assert AuditEvent.objects.get(action="catalog.deactivate").reason == "superseded"


class TestWrites:
    def test_a_bad_row_is_a_400_on_its_field(self, world):
        admin = world.client("platform_admin")
        response = admin.post(URL, BODY | {"revision": "--trust-remote-code"})
        assert response.status_code == 400 and "revision" in response.json()
        response = admin.post(URL, BODY | {"revision": ""})
        assert response.status_code == 400 and "default branch" in response.json()["revision"][0]
        response = admin.post(URL, BODY | {"source": "pvc://models/../etc", "revision": ""})
        assert response.status_code == 400 and "'..'" in response.json()["source"][0]
        assert not CatalogModel.objects.exists()

    def test_patch_changes_only_what_it_sends_and_keeps_the_name(self, world, llama):
        admin = world.client("platform_admin")
        response = admin.patch(f"{URL}{llama.name}/", {"licence": "llama3", "gated": True})
        assert response.status_code == 200
        assert response.json()["gated"] and response.json()["revision"] == COMMIT
        assert admin.patch(f"{URL}{llama.name}/", {"name": "other"}).json()["name"] == [
            "The name 'llama-3-8b' is fixed: policies and requests name it. Create a new row instead."
        ]


class TestFilters:
    def test_task_size_and_search(self, world, llama):
        CatalogModel.objects.create(
            name="bge",
            display_name="BGE small",
            source="BAAI/bge-small-en",
            revision="main",
            task="embedding",
            parameters=33_000_000,
        )
        client = world.client("member")

        def names(**params):
            return sorted(r["name"] for r in client.get(URL, params).json()["results"])

        assert names(task="embedding") == ["bge"]
        assert names(min_params_b=1) == ["llama-3-8b"]
        assert names(max_params_b=1) == ["bge"]
        assert names(search="llama") == ["llama-3-8b"]
        assert client.get(URL, {"task": "nonsense"}).status_code == 400
        assert client.get(URL, {"min_params_b": "lots"}).status_code == 400

    def test_size_buckets_of_the_picker(self, world, llama):
        """`size` takes the request form's picker's buckets (catalog.sizes); a row of unknown size is
        in none of them, and a size that is no bucket is a 400 naming the choices."""
        CatalogModel.objects.create(name="bge", display_name="BGE", source="BAAI/bge-small-en", parameters=33_000_000)
        CatalogModel.objects.create(name="mystery", display_name="Mystery", source="acme/mystery")
        client = world.client("member")

        def names(size):
            return sorted(r["name"] for r in client.get(URL, {"size": size}).json()["results"])

        assert (names("up-to-5b"), names("5-20b"), names("20-100b"), names("over-100b")) == (
            ["bge"],
            [llama.name],
            [],
            [],
        )
        assert names("") == ["bge", llama.name, "mystery"]
        refused = client.get(URL, {"size": "huge"})
        assert refused.status_code == 400 and "huge is not one of the available choices" in refused.json()["size"][0]


def tiny_model(root: Path) -> Path:
    """The tiny Llama's shape (make_tiny_model.MODEL_SHAPE) as config.json plus a safetensors file."""
    shape = MODEL_SHAPE
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "float32",
        "hidden_size": shape["hidden_size"],
        "intermediate_size": shape["intermediate_size"],
        "num_hidden_layers": shape["num_hidden_layers"],
        "num_attention_heads": shape["num_attention_heads"],
        "num_key_value_heads": shape["num_key_value_heads"],
        "max_position_embeddings": shape["max_position_embeddings"],
        "vocab_size": 512,
    }
    directory = write_config(root / "tiny-llama", config)
    write_safetensors(directory / "model.safetensors", {"model.embed_tokens.weight": ("F32", [512, 256])})
    return directory


class TestImportFacts:
    @pytest.fixture
    def root(self, settings, tmp_path) -> Path:
        settings.LOCAL_MODEL_ROOT = tmp_path
        return tmp_path

    def test_facts_come_from_a_local_model_directory_and_are_audited(self, world, root):
        directory = tiny_model(root)
        admin = world.client("platform_admin")
        body = {"name": "tiny", "display_name": "Tiny", "source": str(directory), "task": "completion"}
        assert admin.post(URL, body).status_code == 201
        response = admin.post(f"{URL}tiny/import-facts/")
        assert response.status_code == 200, response.json()
        facts = response.json()
        assert (facts["architecture"], facts["model_type"], facts["layers"]) == ("LlamaForCausalLM", "llama", 2)
        assert (facts["attention_heads"], facts["kv_heads"], facts["head_dim"]) == (4, 2, 64)
        assert facts["max_context"] == 2048 and facts["facts_imported_at"]
        event = AuditEvent.objects.get(action="catalog.import_facts")
        assert event.changes["from"]["layers"] is None and event.changes["to"]["layers"] == 2

    def test_a_hub_model_takes_facts_from_a_local_copy_named_by_path(self, world, root, llama):
        directory = tiny_model(root)
        admin = world.client("platform_admin")
        refused = admin.post(f"{URL}{llama.name}/import-facts/")
        assert refused.status_code == 400 and "never contacts the Hugging Face hub" in refused.json()["path"][0]
        response = admin.post(f"{URL}{llama.name}/import-facts/", {"path": str(directory)})
        assert response.status_code == 200 and response.json()["kv_heads"] == 2

    @pytest.mark.parametrize("source", ["s3://team-bucket/llama", "pvc://models/llama"])
    def test_buckets_and_claims_are_not_reachable_from_the_portal(self, world, root, source):
        CatalogModel.objects.create(name="remote", display_name="Remote", source=source)
        response = world.client("platform_admin").post(f"{URL}remote/import-facts/")
        assert response.status_code == 400
        assert f"{source} is not reachable from the portal" in response.json()["path"][0]

    @pytest.mark.parametrize("path", ["/etc", "relative/dir", "/tmp/../etc"])
    def test_a_path_outside_the_model_root_is_refused(self, world, root, llama, path):
        response = world.client("platform_admin").post(f"{URL}{llama.name}/import-facts/", {"path": path})
        assert response.status_code == 400 and "path" in response.json()
        llama.refresh_from_db()
        assert llama.layers is None

    def test_a_directory_without_config_is_a_field_error(self, world, root, llama):
        (root / "empty").mkdir()
        response = world.client("platform_admin").post(
            f"{URL}{llama.name}/import-facts/", {"path": str(root / "empty")}
        )
        assert response.status_code == 400 and "config.json" in response.json()["path"][0]

    def test_the_schema_documents_the_endpoints(self, world):
        schema = world.client("platform_admin").get("/api/schema/", HTTP_ACCEPT="application/json").json()
        assert {"/api/v1/catalog/models/", "/api/v1/catalog/models/{name}/import-facts/"} <= set(schema["paths"])
