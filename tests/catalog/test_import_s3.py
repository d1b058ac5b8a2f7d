"""Importing a catalog model's facts from an s3:// source: through the service and the API, from
moto's S3 served on loopback (tests.support.s3), with the facts compared to those read from the
same files on disk. Every failure of the bucket or the endpoint is a 400 on `path`, never a 500.
"""

from __future__ import annotations

import struct
import time

import pytest

from catalog.models import FACT_FIELDS, CatalogModel
from catalog.permissions import Standing
from catalog.services import _facts_store, catalog_model_import_facts
from core.exceptions import ConflictError
from core.models import AuditEvent
from runtime.modelfacts import JSON_MAX_BYTES, read_model_dir
from tests.support import s3
from tests.support.model_dirs import LLAMA3_8B, write_config

URL = "/api/v1/catalog/models/"
SOURCE = "s3://models/team/tiny-llama"


@pytest.fixture(scope="module")
def server():
    with s3.s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def bucket(server, settings) -> str:
    """The portal pointed at the moto server, its buckets emptied."""
    s3.reset(server)
    settings.MODEL_IMPORT_S3_ENDPOINT_URL = server
    settings.MODEL_IMPORT_S3_REGION = s3.REGION
    settings.MODEL_IMPORT_S3_ACCESS_KEY_ID = s3.ACCESS_KEY_ID
    settings.MODEL_IMPORT_S3_SECRET_ACCESS_KEY = s3.SECRET_ACCESS_KEY
    settings.MODEL_IMPORT_S3_TIMEOUT_SECONDS = 2.0
    settings.MODEL_IMPORT_S3_DEADLINE_SECONDS = 20.0
    return server


@pytest.fixture
def local(tmp_path, bucket):
    """The tiny checkpoint on disk, and the same files under SOURCE."""
    directory = s3.tiny_checkpoint(tmp_path / "tiny-llama")
    s3.upload_dir(bucket, directory, "models", "team/tiny-llama")
    return directory


def facts_of(row: CatalogModel) -> dict:
    row.refresh_from_db()
    return {name: getattr(row, name) for name in FACT_FIELDS}


def expected(directory) -> dict:
    """What the row stores for the facts read from `directory` ("" where the facts say None)."""
    facts = read_model_dir(directory).as_dict()
    return {k: ("" if v is None and k in ("architecture", "model_type", "dtype") else v) for k, v in facts.items()}


class TestImport:
    def test_the_service_stores_the_facts_of_the_same_files_on_disk(self, world, local):
        row = CatalogModel.objects.create(name="tiny", display_name="Tiny", source=SOURCE, task="completion")
        admin = world.users["platform_admin"]
        catalog_model_import_facts(row_id=row.pk, actor=admin, standing=Standing.PLATFORM_ADMIN)
        assert facts_of(row) == expected(local)
        assert (row.layers, row.kv_heads, row.max_context) == (2, 2, 1024)
        event = AuditEvent.objects.get(action="catalog.import_facts")
        assert event.reason == f"Imported from {SOURCE}" and event.changes["to"]["layers"] == 2

    def test_the_api_imports_from_the_rows_own_bucket(self, world, local):
        admin = world.client("platform_admin")
        body = {"name": "tiny", "display_name": "Tiny", "source": SOURCE + "/", "task": "completion"}
        assert admin.post(URL, body).status_code == 201
        response = admin.post(f"{URL}tiny/import-facts/")
        assert response.status_code == 200, response.json()
        assert {k: response.json()[k] for k in FACT_FIELDS} == expected(local)

    def test_a_hub_row_takes_facts_from_a_bucket_copy_named_by_path(self, world, local, llama):
        response = world.client("platform_admin").post(f"{URL}{llama.name}/import-facts/", {"path": SOURCE})
        assert response.status_code == 200, response.json()
        assert facts_of(llama) == expected(local)

    def test_the_platform_page_imports_from_the_bucket(self, world, local):
        CatalogModel.objects.create(name="tiny", display_name="Tiny", source=SOURCE, task="completion")
        browser = world.browser("platform_admin")
        page = browser.get("/platform/catalog/tiny/").content.decode()
        assert f"Empty: read from {SOURCE}." in page and "not reachable" not in page
        response = browser.post("/platform/catalog/tiny/import-facts/", follow=True)
        assert "Facts of tiny imported." in response.content.decode()

    def test_without_an_endpoint_a_bucket_is_not_reachable(self, world, local, settings):
        settings.MODEL_IMPORT_S3_ENDPOINT_URL = None
        CatalogModel.objects.create(name="tiny", display_name="Tiny", source=SOURCE)
        response = world.client("platform_admin").post(f"{URL}tiny/import-facts/")
        assert response.status_code == 400
        assert "no S3 endpoint is configured (MODEL_IMPORT_S3_ENDPOINT_URL)" in response.json()["path"][0]
        page = world.browser("platform_admin").get("/platform/catalog/tiny/").content.decode()
        assert f"{SOURCE} is not reachable from the portal" in page

    def test_a_source_changed_while_the_facts_were_read_is_a_conflict(self, world, local):
        row = CatalogModel.objects.create(name="tiny", display_name="Tiny", source=SOURCE)
        facts = read_model_dir(local)
        with pytest.raises(ConflictError, match="changed while its facts were read"):
            _facts_store(
                row_id=row.pk,
                source="s3://models/elsewhere",
                facts=facts,
                origin=SOURCE,
                actor=world.users["platform_admin"],
                standing=Standing.PLATFORM_ADMIN,
                reason="",
            )
        assert facts_of(row)["layers"] is None

    @pytest.mark.slow
    @pytest.mark.local_engine
    def test_the_generated_tiny_model_from_a_bucket(self, world, bucket, tmp_path):
        """In the slow suite, where the [local] extra (torch, transformers) generates the model."""
        from django.core.management import call_command

        call_command("make_tiny_model", output=tmp_path / "tiny", verbosity=0)
        s3.upload_dir(bucket, tmp_path / "tiny", "generated", "tiny-llama")
        admin = world.client("platform_admin")
        body = {"name": "tiny", "display_name": "Tiny", "source": "s3://generated/tiny-llama", "task": "chat"}
        assert admin.post(URL, body).status_code == 201
        response = admin.post(f"{URL}tiny/import-facts/")
        assert response.status_code == 200, response.json()
        assert {k: response.json()[k] for k in FACT_FIELDS} == expected(tmp_path / "tiny")
        assert response.json()["parameters"] > 0 and response.json()["max_context"] == 2048


class TestRefusals:
    """A 400 on `path` naming what is wrong, in bounded time; the row and the audit log untouched."""

    def refused(self, world, row: CatalogModel, *, path: str = "", within: float = 10) -> str:
        before = facts_of(row)
        started = time.monotonic()
        response = world.client("platform_admin").post(f"{URL}{row.name}/import-facts/", {"path": path})
        assert time.monotonic() - started < within
        assert response.status_code == 400, response.content
        assert facts_of(row) == before and not AuditEvent.objects.filter(action="catalog.import_facts").exists()
        return response.json()["path"][0]

    @pytest.mark.parametrize("path", ["s3://models/team/../tiny-llama", "s3://models/./x", "s3://models//x"])
    def test_a_path_that_climbs(self, world, bucket, llama, path):
        assert "may not contain '..', or empty or '.' path segments" in self.refused(world, llama, path=path)

    def test_a_source_that_climbs_is_refused_when_the_row_is_written(self, world, bucket):
        body = {"name": "up", "display_name": "Up", "source": "s3://models/../etc"}
        response = world.client("platform_admin").post(URL, body)
        assert response.status_code == 400 and "'..'" in response.json()["source"][0]

    def test_a_header_length_of_ten_gigabytes(self, world, bucket, tmp_path):
        s3.put(bucket, "models", "evil/config.json", (write_config(tmp_path, LLAMA3_8B) / "config.json").read_bytes())
        s3.put(bucket, "models", "evil/model.safetensors", struct.pack("<Q", 10 * 10**9) + b"{}")
        row = CatalogModel.objects.create(name="evil", display_name="Evil", source="s3://models/evil")
        message = self.refused(world, row)
        assert "s3://models/evil/model.safetensors: declares a 10000000000-byte header" in message

    def test_a_config_over_the_size_limit(self, world, bucket):
        s3.put(bucket, "models", "big/config.json", b"{" + b" " * JSON_MAX_BYTES + b"}")
        row = CatalogModel.objects.create(name="big", display_name="Big", source="s3://models/big")
        assert f"config.json: {JSON_MAX_BYTES + 2} bytes, more than" in self.refused(world, row)

    def test_malformed_json(self, world, bucket):
        s3.put(bucket, "models", "bad/config.json", b'{"num_hidden_layers": ')
        row = CatalogModel.objects.create(name="bad", display_name="Bad", source="s3://models/bad")
        assert "s3://models/bad/config.json: not valid JSON" in self.refused(world, row)

    def test_no_such_bucket(self, world, bucket):
        row = CatalogModel.objects.create(name="gone", display_name="Gone", source="s3://gone/m")
        assert f"s3://gone: no such bucket at {bucket}" in self.refused(world, row)

    def test_an_unreachable_endpoint(self, world, bucket, settings, llama):
        settings.MODEL_IMPORT_S3_ENDPOINT_URL = url = f"http://127.0.0.1:{s3.free_port()}"
        message = self.refused(world, llama, path=SOURCE, within=5)
        assert f"{url} is unreachable" in message and s3.SECRET_ACCESS_KEY not in message
