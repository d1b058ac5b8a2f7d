"""Model directories written on the spot, for the code that reads a model's files
(runtime.modelfacts): config.json as a hub checkpoint has it, and safetensors files whose header is
real and whose tensor data is a hole (a sparse file), so a "70B" checkpoint costs no disk.

The format, from huggingface/safetensors (README, "Format"): an 8-byte little-endian header length,
the header (JSON: name → {dtype, shape, data_offsets}, optional "__metadata__"), then the data.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

BITS = {"BF16": 16, "F16": 16, "F32": 32, "F8_E4M3": 8, "I32": 32, "U8": 8, "F4": 4}

# A Llama-3-8B-shaped config (meta-llama/Meta-Llama-3-8B config.json, the fields sizing reads).
LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "torch_dtype": "bfloat16",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}
# A DeepSeek-V3-shaped config: multi-head latent attention (deepseek-ai/DeepSeek-V3 config.json).
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "torch_dtype": "bfloat16",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
    "vocab_size": 129280,
}
# A LLaVA-1.5-shaped multimodal config: the language model's numbers live in text_config.
LLAVA = {
    "architectures": ["LlavaForConditionalGeneration"],
    "model_type": "llava",
    "torch_dtype": "float16",
    "image_token_index": 32000,
    "text_config": {
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "max_position_embeddings": 4096,
        "vocab_size": 32064,
    },
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024, "num_hidden_layers": 24},
}


def write_config(directory: Path, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]]) -> tuple[bytes, int]:
    """(the length prefix + header, the data length) for `tensors`: name → (dtype, shape)."""
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = (math.prod(shape) * BITS[dtype] + 7) // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    return struct.pack("<Q", len(raw)) + raw, offset


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    """A safetensors file whose data is a hole; returns the data's length in bytes."""
    head, data = safetensors_bytes(tensors)
    with path.open("wb") as handle:
        handle.write(head)
        handle.truncate(len(head) + data)
    return data


def write_raw_safetensors(path: Path, length: int, header: bytes, data: int = 0) -> None:
    """A safetensors file with whatever length prefix and header bytes a test wants (hostile cases)."""
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", length) + header)
        handle.truncate(8 + len(header) + data)
