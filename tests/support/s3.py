"""A bucket for the code that reads a model's files from S3 (runtime.modelfacts_s3): moto's S3 as a
real HTTP server on loopback (ThreadedMotoServer, the `moto[server]` dev dependency), so boto3's
requests, ranged GETs and errors travel over a socket as they would to MinIO or AWS. No cloud.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
from moto.server import ThreadedMotoServer

from deployments.management.commands.make_tiny_model import MODEL_SHAPE
from tests.support.model_dirs import write_config, write_safetensors

ACCESS_KEY_ID = "portal-test"
SECRET_ACCESS_KEY = "portal-test-secret"  # moto's server accepts any; the reader must send them
REGION = "us-east-1"


@contextmanager
def s3_server() -> Iterator[str]:
    """A moto S3 server on a free loopback port; yields its endpoint URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def reset(endpoint: str) -> None:
    """Forget every bucket (moto's reset API), so each test starts from none."""
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=5).close()


def client(endpoint: str):
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY_ID,
        aws_secret_access_key=SECRET_ACCESS_KEY,
    )


def upload_dir(endpoint: str, directory: Path, bucket: str, prefix: str) -> list[str]:
    """Every file under `directory` (subdirectories too) to `bucket` under `prefix`; the bucket is
    created when absent. Returns the keys written."""
    s3 = client(endpoint)
    if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        s3.create_bucket(Bucket=bucket)
    keys = []
    for file in sorted(p for p in directory.rglob("*") if p.is_file()):
        key = f"{prefix.rstrip('/')}/{file.relative_to(directory).as_posix()}"
        s3.put_object(Bucket=bucket, Key=key, Body=file.read_bytes())
        keys.append(key)
    return keys


def put(endpoint: str, bucket: str, key: str, body: bytes) -> None:
    s3 = client(endpoint)
    if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key=key, Body=body)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released): connection refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def silent_server() -> Iterator[str]:
    """An endpoint that accepts connections and never answers (a hung proxy, a stalled server)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)  # the kernel completes the handshakes; nobody reads or writes
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def tiny_checkpoint(directory: Path) -> Path:
    """The tiny Llama's shape (make_tiny_model.MODEL_SHAPE) as a two-shard checkpoint with its index,
    tokenizer and generation configs, and a nested copy (`original/`) that no reader may count."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "bfloat16",
        "vocab_size": 512,
        "tie_word_embeddings": False,
        **MODEL_SHAPE,
    }
    write_config(directory, config)
    (directory / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1024, "eos_token": "</s>"}))
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": 2, "temperature": 0.7}))
    one = write_safetensors(directory / "model-00001-of-00002.safetensors", {"embed": ("BF16", [512, 256])})
    two = write_safetensors(directory / "model-00002-of-00002.safetensors", {"lm_head": ("BF16", [512, 256])})
    index = {"metadata": {"total_size": one + two}, "weight_map": {"embed": "model-00001-of-00002.safetensors"}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    (directory / "original").mkdir()
    write_safetensors(directory / "original" / "consolidated.safetensors", {"all": ("F32", [1024])})
    return directory
