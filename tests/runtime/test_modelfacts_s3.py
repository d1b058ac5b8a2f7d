"""runtime.modelfacts_s3: a model's facts read from a bucket are the facts of the same files read
from a directory, and what a bucket or an endpoint can do wrong is a ModelFactsError in bounded time.

The bucket is moto's S3 as a real HTTP server on loopback (tests.support.s3); the model directories
are written here (tests.support.model_dirs), uploaded with boto3, and read both ways.
"""

from __future__ import annotations

import json
import struct
import time

import pytest

from runtime.modelfacts import JSON_MAX_BYTES, ModelFactsError, read_model_dir, read_model_files
from runtime.modelfacts_s3 import S3Endpoint, S3Files, read_model_s3
from tests.support import s3
from tests.support.model_dirs import LLAMA3_8B, write_config
from tests.support.s3 import tiny_checkpoint


@pytest.fixture(scope="module")
def server():
    with s3.s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def endpoint(server) -> S3Endpoint:
    s3.reset(server)
    return S3Endpoint(
        url=server,
        region=s3.REGION,
        access_key_id=s3.ACCESS_KEY_ID,
        secret_access_key=s3.SECRET_ACCESS_KEY,
        timeout_seconds=2,
        deadline_seconds=20,
    )


class Recording(S3Files):
    """The real reader, noting each ranged read it makes."""

    def __init__(self, *args):
        super().__init__(*args)
        self.reads: list[tuple[str, int, int]] = []

    def read(self, name: str, start: int, length: int) -> bytes:
        self.reads.append((name, start, length))
        return super().read(name, start, length)


class TestSameAsLocal:
    def test_a_bucket_prefix_gives_the_facts_of_the_same_directory(self, tmp_path, server, endpoint):
        directory = tiny_checkpoint(tmp_path / "tiny")
        s3.upload_dir(server, directory, "models", "team/tiny")
        local = read_model_dir(directory)
        assert read_model_s3("s3://models/team/tiny", endpoint) == local
        assert read_model_s3("s3://models/team/tiny/", endpoint) == local
        # What both read: the tokenizer caps the context as vLLM does; the shards, not original/.
        assert (local.max_context, local.parameters, local.layers) == (1024, 2 * 512 * 256, 2)

    def test_only_the_small_files_and_the_headers_are_read(self, tmp_path, server, endpoint):
        directory = tiny_checkpoint(tmp_path / "tiny")
        s3.upload_dir(server, directory, "models", "tiny")
        files = Recording("s3://models/tiny", endpoint)
        read_model_files(files)
        one, two = (
            struct.unpack("<Q", (directory / f"model-0000{i}-of-00002.safetensors").read_bytes()[:8])[0] for i in (1, 2)
        )
        size = {name: (directory / name).stat().st_size for name in ("config.json", "tokenizer_config.json")}
        index = (directory / "model.safetensors.index.json").stat().st_size
        assert files.reads == [
            ("config.json", 0, size["config.json"]),
            ("tokenizer_config.json", 0, size["tokenizer_config.json"]),
            ("model.safetensors.index.json", 0, index),
            ("model-00001-of-00002.safetensors", 0, 8),
            ("model-00001-of-00002.safetensors", 8, one),
            ("model-00002-of-00002.safetensors", 0, 8),
            ("model-00002-of-00002.safetensors", 8, two),
        ]

    def test_a_whole_bucket_is_a_model_directory_too(self, tmp_path, server, endpoint):
        directory = write_config(tmp_path / "m", LLAMA3_8B)
        s3.put(server, "llama", "config.json", (directory / "config.json").read_bytes())
        assert read_model_s3("s3://llama", endpoint) == read_model_dir(directory)


class TestRefusals:
    """Each a ModelFactsError naming the object or the endpoint, in bounded time."""

    def refused(self, uri: str, endpoint: S3Endpoint, *, within: float = 10) -> str:
        started = time.monotonic()
        with pytest.raises(ModelFactsError) as error:
            read_model_s3(uri, endpoint)
        assert time.monotonic() - started < within
        return str(error.value)

    def test_a_header_length_of_ten_gigabytes_is_refused_after_eight_bytes(self, server, endpoint):
        s3.put(server, "models", "m/config.json", json.dumps(LLAMA3_8B).encode())
        s3.put(server, "models", "m/model.safetensors", struct.pack("<Q", 10 * 10**9) + b"{}" + b"\0" * 64)
        files = Recording("s3://models/m", endpoint)
        with pytest.raises(ModelFactsError, match=r"s3://models/m/model.safetensors: declares a 10000000000-byte"):
            read_model_files(files)
        assert files.reads[-1] == ("model.safetensors", 0, 8)

    def test_a_config_over_the_limit_is_refused_unread(self, server, endpoint):
        s3.put(server, "models", "big/config.json", b"{" + b" " * JSON_MAX_BYTES + b"}")
        files = Recording("s3://models/big", endpoint)
        with pytest.raises(ModelFactsError, match=rf"config.json: {JSON_MAX_BYTES + 2} bytes, more than"):
            read_model_files(files)
        assert files.reads == []

    def test_a_malformed_config(self, server, endpoint):
        s3.put(server, "models", "bad/config.json", b"{not json")
        assert "s3://models/bad/config.json: not valid JSON" in self.refused("s3://models/bad", endpoint)

    def test_a_prefix_without_a_config(self, server, endpoint):
        s3.put(server, "models", "weights-only/model.safetensors", b"\0" * 16)
        assert "config.json: missing" in self.refused("s3://models/weights-only", endpoint)

    def test_an_empty_prefix(self, server, endpoint):
        s3.put(server, "models", "other/config.json", b"{}")
        assert "s3://models/absent/: no objects under this prefix" in self.refused("s3://models/absent", endpoint)

    def test_no_such_bucket(self, endpoint):
        assert f"s3://nobucket: no such bucket at {endpoint.url}" in self.refused("s3://nobucket/m", endpoint)

    @pytest.mark.parametrize(
        "uri", ["s3://models/a/../b", "s3://models/..", "s3://models//etc", "s3://models/./m", "s3://Models/m", "s3:/m"]
    )
    def test_a_uri_that_climbs_or_is_malformed_sends_no_request(self, uri):
        # No endpoint at all: a request would fail differently than the URI check.
        nowhere = S3Endpoint(url=f"http://127.0.0.1:{s3.free_port()}")
        assert "not an s3://bucket/path URI of plain path segments" in self.refused(uri, nowhere, within=1)

    def test_an_unreachable_endpoint(self):
        url = f"http://127.0.0.1:{s3.free_port()}"
        closed = S3Endpoint(url=url, access_key_id="k", secret_access_key="s", timeout_seconds=1)
        message = self.refused("s3://models/m", closed, within=5)
        assert f"s3://models/m/: {url} is unreachable (EndpointConnectionError)" in message

    def test_an_endpoint_that_never_answers(self):
        with s3.silent_server() as url:
            silent = S3Endpoint(url=url, access_key_id="k", secret_access_key="s", timeout_seconds=0.5)
            message = self.refused("s3://models/m", silent, within=5)
        assert f"{url} stopped answering (ReadTimeoutError)" in message

    def test_the_deadline_holds_across_requests(self, tmp_path, server, endpoint):
        s3.upload_dir(server, tiny_checkpoint(tmp_path / "tiny"), "models", "tiny")
        short = S3Endpoint(**{**endpoint.__dict__, "deadline_seconds": 0.05})
        files = S3Files("s3://models/tiny", short)
        time.sleep(0.1)
        with pytest.raises(ModelFactsError, match=r"s3://models/tiny/: not read within 0.05 s"):
            read_model_files(files)

    def test_no_credentials_in_a_message_or_the_repr(self, endpoint):
        message = self.refused("s3://nobucket/m", endpoint)
        assert s3.SECRET_ACCESS_KEY not in message and s3.SECRET_ACCESS_KEY not in repr(endpoint)
