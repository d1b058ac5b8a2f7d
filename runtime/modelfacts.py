"""What a model's own files say about it: the architecture facts sizing needs and the catalog
stores, read from a model directory (config.json, tokenizer_config.json, model.safetensors.index.json
and the safetensors headers; generation_config.json holds sampling defaults, no fact, and is not read).

The parsing and its size limits live here once; a directory is read through `ModelFiles`: a local
one (LocalFiles, below) or a bucket's prefix (runtime.modelfacts_s3).

Interface shared by the catalog (catalog app: import a model's facts) and the sizing estimate
(deployments.sizing). Imports no app.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol


class ModelFactsError(ValueError):
    """A model directory whose files cannot be read as a model (message names the file)."""


@dataclass(frozen=True)
class ModelFacts:
    """Architecture facts; None where the files do not say."""

    architecture: str | None = None  # config.json "architectures"[0], e.g. "LlamaForCausalLM"
    model_type: str | None = None  # config.json "model_type"
    parameters: int | None = None  # exact from the safetensors headers/index, else estimated
    weight_bytes: int | None = None  # the checkpoint's tensor bytes (safetensors), else None
    dtype: str | None = None  # config.json "torch_dtype" / "dtype", e.g. "bfloat16"
    layers: int | None = None
    hidden_size: int | None = None
    attention_heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    max_context: int | None = None  # max_position_embeddings (or the like)
    vocab_size: int | None = None
    # Per-token KV cache in elements when the architecture does not follow the GQA formula
    # (e.g. multi-head latent attention); None: layers × kv_heads × head_dim × 2.
    kv_elements_per_token: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


# What is read and how much of it: a model directory may come from anyone (an upload, a bucket),
# so every file is size-capped before it is parsed and nothing is ever imported or executed.
JSON_MAX_BYTES = 4 * 1024 * 1024  # config.json and the like are a few KiB
INDEX_MAX_BYTES = 64 * 1024 * 1024  # the index of a 600B-parameter checkpoint is ~10 MB
# The safetensors format's own ceiling on a header (huggingface/safetensors, safetensors/src/tensor.rs,
# MAX_HEADER_SIZE): a larger length prefix is refused before anything is read.
SAFETENSORS_HEADER_MAX = 100_000_000
SAFETENSORS_FILES_MAX = 4096
# All headers of one checkpoint together: a real one's are a few MB (a 163-shard 671B checkpoint's,
# ~10 MB), so this bounds what a directory of many near-limit headers could make the portal read.
SAFETENSORS_HEADERS_TOTAL_MAX = 256 * 1024 * 1024
JSON_DEPTH_MAX = 64  # configs nest two or three levels; deeper is not a model config

# Bits per element of each safetensors dtype (safetensors/src/tensor.rs, Dtype::bitsize).
SAFETENSORS_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
}


class ModelFiles(Protocol):
    """A model directory's files, wherever they lie (a local directory, a bucket's prefix): the
    parsing below reads only through these three calls, so its size limits hold for every reader."""

    def where(self, name: str) -> str:
        """How a message names file `name`, e.g. "/models/llama/config.json"."""

    def size(self, name: str) -> int | None:
        """The size in bytes of file `name` directly in the directory; None when it is absent."""

    def names(self, suffix: str) -> list[str]:
        """The names of the files directly in the directory that end with `suffix`, sorted."""

    def read(self, name: str, start: int, length: int) -> bytes:
        """At most `length` bytes of file `name` from offset `start` (never more: the caller has
        already held `length` to a limit)."""


def read_model_dir(path: Path) -> ModelFacts:
    """The facts of the model in directory `path`; ModelFactsError when config.json is missing or
    malformed. Never executes code from the directory."""
    return read_model_files(LocalFiles(path))


def read_model_files(files: ModelFiles) -> ModelFacts:
    """The facts of the model whose files `files` reads; ModelFactsError when config.json is
    missing or malformed, or a file is larger than its limit.

    Architecture numbers come from config.json (its `text_config` for a multimodal model), the
    context length capped by tokenizer_config.json's `model_max_length` as vLLM caps it; the
    checkpoint's size from `model.safetensors.index.json` (metadata.total_size) or else from the
    headers of the `*.safetensors` files, whose tensors are never loaded. Parameters are the
    elements those headers declare (for packed quantized checkpoints: the stored elements), else
    the index's `total_parameters`, else an estimate from the config for dense decoder models.
    """
    config = _read_json(files, "config.json", JSON_MAX_BYTES)
    if config is None:
        raise ModelFactsError(f"{files.where('config.json')}: missing; a model directory needs its config.json.")
    facts = _config_facts(config, files.where("config.json"))
    tokenizer = _read_json(files, "tokenizer_config.json", JSON_MAX_BYTES)
    if tokenizer is not None:
        facts["max_context"] = _tokenizer_capped(facts["max_context"], tokenizer, files.where("tokenizer_config.json"))
    weight_bytes, parameters = _weights(files)
    if parameters is None:
        parameters = _estimated_parameters(config, facts)
    return ModelFacts(**{**facts, "weight_bytes": weight_bytes, "parameters": parameters})


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


class LocalFiles:
    """The files of a directory on this machine. A file that is (or links to) anything outside the
    directory is refused; so is anything but a regular file."""

    def __init__(self, path: Path):
        root = Path(path)
        if root.is_symlink() or not root.is_dir():
            raise ModelFactsError(f"{root}: not a model directory.")
        self.root = root.resolve()

    def where(self, name: str) -> str:
        return str(self.root / name)

    def _inside(self, name: str) -> Path | None:
        """`root/name` resolved, None when it does not exist."""
        candidate = self.root / name
        if not candidate.exists() and not candidate.is_symlink():
            return None
        resolved = candidate.resolve()
        if not resolved.is_relative_to(self.root):
            raise ModelFactsError(f"{candidate}: a link that leaves the model directory; refused.")
        if not resolved.is_file():
            raise ModelFactsError(f"{candidate}: not a regular file.")
        return resolved

    def size(self, name: str) -> int | None:
        file = self._inside(name)
        return None if file is None else file.stat().st_size

    def names(self, suffix: str) -> list[str]:
        return sorted(p.name for p in self.root.glob(f"*{suffix}"))

    def read(self, name: str, start: int, length: int) -> bytes:
        file = self._inside(name)
        if file is None:
            raise ModelFactsError(f"{self.where(name)}: vanished while it was read.")
        try:
            with file.open("rb") as handle:
                handle.seek(start)
                return handle.read(length)
        except OSError as error:
            raise ModelFactsError(f"{self.where(name)}: cannot be read ({error.strerror}).") from None


def _read_json(files: ModelFiles, name: str, limit: int) -> dict | None:
    """The JSON object in file `name`, None when the file is absent. The size is checked before a
    byte is read, and no more than the size is read."""
    size = files.size(name)
    if size is None:
        return None
    if size > limit:
        raise ModelFactsError(f"{files.where(name)}: {size} bytes, more than the {limit} a model's JSON may have.")
    raw = files.read(name, 0, size)
    if len(raw) != size:
        raise ModelFactsError(f"{files.where(name)}: {len(raw)} bytes read of {size}; it changed while read.")
    return _parse_json(raw, files.where(name))


def _parse_json(raw: bytes, where: str) -> dict:
    if _nesting(raw) > JSON_DEPTH_MAX:
        raise ModelFactsError(f"{where}: JSON nested deeper than {JSON_DEPTH_MAX} levels; refused.")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise ModelFactsError(f"{where}: not valid JSON ({error}).") from None
    if not isinstance(value, dict):
        raise ModelFactsError(f"{where}: expected a JSON object, found {type(value).__name__}.")
    return value


def _nesting(raw: bytes) -> int:
    """The deepest bracket nesting of a JSON text (brackets inside strings included: an upper bound),
    so a hostile file cannot drive the parser into its recursion limit."""
    depth = deepest = 0
    for byte in raw:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


# ---------------------------------------------------------------------------------------------
# config.json
# ---------------------------------------------------------------------------------------------


def _config_facts(config: dict, where: str) -> dict:
    """ModelFacts fields from a config; a multimodal config's language model is its `text_config`
    (vLLM sizes the KV cache from the same: `hf_text_config`)."""
    text = config.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise ModelFactsError(f"{where}: text_config must be an object.")
    text = {**config, **text} if text else config

    def number(*keys: str) -> int | None:
        for key in keys:
            value = text.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ModelFactsError(f"{where}: {key} must be a positive integer, not {value!r}.")
            return value
        return None

    architectures = config.get("architectures") or text.get("architectures")
    if architectures is not None and (
        not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures)
    ):
        raise ModelFactsError(f"{where}: architectures must be a list of names.")
    model_type = config.get("model_type")
    dtype = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype")
    for key, value in (("model_type", model_type), ("torch_dtype", dtype)):
        if value is not None and not isinstance(value, str):
            raise ModelFactsError(f"{where}: {key} must be a string, not {value!r}.")

    layers = number("num_hidden_layers", "n_layer", "num_layers")
    hidden = number("hidden_size", "n_embd", "d_model")
    heads = number("num_attention_heads", "n_head")
    kv_heads = number("num_key_value_heads") or heads
    head_dim = number("head_dim")
    if head_dim is None and hidden and heads and hidden % heads == 0:
        head_dim = hidden // heads
    kv_elements = None
    kv_lora_rank = number("kv_lora_rank")
    if kv_lora_rank is not None and layers is not None:
        # Multi-head latent attention caches one latent (kv_lora_rank) plus the shared RoPE key
        # (qk_rope_head_dim) per layer and token, with no separate V and one "head" on every TP rank:
        # vLLM v0.32.0 sizes it so (vllm/transformers_utils/model_arch_config_convertor.py
        # get_head_size: kv_lora_rank + qk_rope_head_dim; vllm/config/model.py get_num_kv_heads: 1
        # under MLA; vllm/v1/kv_cache_interface.py MLAAttentionSpec: head_size_v = 0).
        kv_elements = layers * (kv_lora_rank + (number("qk_rope_head_dim") or 0))
    return {
        "architecture": architectures[0] if architectures else None,
        "model_type": model_type.strip() if isinstance(model_type, str) else None,
        "dtype": dtype.removeprefix("torch.") if dtype else None,
        "layers": layers,
        "hidden_size": hidden,
        "attention_heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "max_context": number("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"),
        "vocab_size": number("vocab_size"),
        "kv_elements_per_token": kv_elements,
    }


def _tokenizer_capped(max_context: int | None, tokenizer: dict, where: str) -> int | None:
    """The context length as vLLM derives it: the config's, capped by the tokenizer's
    `model_max_length` (vLLM v0.32.0, vllm/config/model.py _get_and_verify_max_len: "Consider
    model_max_length in tokenizer_config"). Tokenizers without a limit write a huge sentinel
    (transformers' VERY_LARGE_INTEGER, 1e30), which caps nothing."""
    value = tokenizer.get("model_max_length")
    if value is None or max_context is None:
        return max_context
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ModelFactsError(f"{where}: model_max_length must be a positive number, not {value!r}.")
    return max_context if value >= max_context else int(value)


def _estimated_parameters(config: dict, facts: dict) -> int | None:
    """Parameters of a dense decoder from its config, when no checkpoint says: embeddings (twice when
    untied), attention projections and a gated MLP per layer. None for mixture-of-experts or
    latent-attention models and anything the config leaves unsaid: a wrong guess sizes wrongly."""
    text = {**config, **(config.get("text_config") or {})}
    hidden, layers, heads = facts["hidden_size"], facts["layers"], facts["attention_heads"]
    vocab, kv_heads, head_dim = facts["vocab_size"], facts["kv_heads"], facts["head_dim"]
    intermediate = text.get("intermediate_size")
    moe = any(text.get(key) for key in ("num_local_experts", "n_routed_experts", "num_experts"))
    if moe or facts["kv_elements_per_token"] is not None or not isinstance(intermediate, int):
        return None
    if None in (hidden, layers, heads, vocab, kv_heads, head_dim):
        return None
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * intermediate
    embeddings = vocab * hidden * (1 if text.get("tie_word_embeddings", True) else 2)
    return embeddings + layers * (attention + mlp + 2 * hidden) + hidden


# ---------------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------------


def _weights(files: ModelFiles) -> tuple[int | None, int | None]:
    """(weight bytes, parameters) of the checkpoint; None for what the files do not say."""
    weight_bytes = parameters = None
    index = _read_json(files, "model.safetensors.index.json", INDEX_MAX_BYTES)
    if index is not None:
        metadata = index.get("metadata") or {}
        where = files.where("model.safetensors.index.json")
        if not isinstance(metadata, dict):
            raise ModelFactsError(f"{where}: metadata must be an object.")
        weight_bytes = _count(metadata.get("total_size"), "metadata.total_size", where)
        parameters = _count(metadata.get("total_parameters"), "metadata.total_parameters", where)
    shards = files.names(".safetensors")
    if len(shards) > SAFETENSORS_FILES_MAX:
        raise ModelFactsError(f"{files.where('')}: {len(shards)} safetensors files, more than {SAFETENSORS_FILES_MAX}.")
    if shards:
        budget = [SAFETENSORS_HEADERS_TOTAL_MAX]
        sizes = [_safetensors_header(files, name, budget) for name in shards]
        parameters = sum(numel for numel, _ in sizes)
        if weight_bytes is None:
            weight_bytes = sum(size for _, size in sizes)
    return weight_bytes, parameters


def _count(value, name: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ModelFactsError(f"{where}: {name} must be a non-negative integer, not {value!r}.")
    return value


def _safetensors_header(files: ModelFiles, name: str, budget: list[int]) -> tuple[int, int]:
    """(elements, bytes) of the tensors one safetensors file declares, from its header alone: an
    8-byte little-endian length, then that many bytes of JSON (huggingface/safetensors, README
    "Format"). The length is checked against the format's ceiling, the file's size and what is left
    of `budget` (the bytes all headers together may take) before the header is read; the tensor
    data is never read."""
    where = files.where(name)
    size = files.size(name)
    if size is None:
        raise ModelFactsError(f"{where}: vanished while it was read.")
    prefix = files.read(name, 0, 8) if size >= 8 else b""
    if len(prefix) < 8:
        raise ModelFactsError(f"{where}: too short for a safetensors header.")
    (length,) = struct.unpack("<Q", prefix)
    if length > SAFETENSORS_HEADER_MAX or length > size - 8:
        raise ModelFactsError(
            f"{where}: declares a {length}-byte header (file {size} bytes, at most {SAFETENSORS_HEADER_MAX})."
        )
    if length > budget[0]:
        raise ModelFactsError(
            f"{where}: the safetensors headers together exceed {SAFETENSORS_HEADERS_TOTAL_MAX} bytes; refused."
        )
    budget[0] -= length
    raw = files.read(name, 8, length)
    if len(raw) != length:
        raise ModelFactsError(f"{where}: {len(raw)} header bytes read of {length}; it changed while read.")
    header = _parse_json(raw, where)
    data_bytes = size - 8 - length
    elements = total = 0
    for tensor, entry in header.items():
        if tensor == "__metadata__":
            continue
        numel, nbytes = _tensor_size(entry, tensor, where)
        start, end = entry["data_offsets"]
        if end - start != nbytes or end > data_bytes:
            raise ModelFactsError(f"{where}: tensor {tensor!r} has offsets that do not match its shape and dtype.")
        elements += numel
        total += nbytes
    return elements, total


def _tensor_size(entry, tensor: str, where: str) -> tuple[int, int]:
    """(elements, bytes) of one header entry; ModelFactsError for anything malformed."""
    ok = (
        isinstance(entry, dict)
        and entry.get("dtype") in SAFETENSORS_BITS
        and isinstance(entry.get("shape"), list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in entry["shape"])
        and isinstance(entry.get("data_offsets"), list)
        and len(entry["data_offsets"]) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in entry["data_offsets"])
        and entry["data_offsets"][0] <= entry["data_offsets"][1]
    )
    if not ok:
        raise ModelFactsError(f"{where}: tensor {tensor!r} is not a valid safetensors header entry.")
    numel = math.prod(entry["shape"])
    return numel, (numel * SAFETENSORS_BITS[entry["dtype"]] + 7) // 8
