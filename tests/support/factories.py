"""Deployment drafts for tests."""

from __future__ import annotations


def draft(world, **overrides) -> dict:
    data = {
        "name": "llama-chat",
        "model_source": "meta-llama/Meta-Llama-3-8B-Instruct",
        "served_model_name": "llama3-8b",
        "flavor": world.h100,
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "min_replicas": 1,
        "max_replicas": 2,
        "target_ongoing_requests": 16,
        "max_model_len": 8192,
        "gpu_memory_utilization": 0.9,
        "enable_chunked_prefill": True,
        "quantization": "",
        "dtype": "bfloat16",
        "backend": "kuberay",
    }
    data.update(overrides)
    if overrides.get("name", "llama-chat") != "llama-chat" and "served_model_name" not in overrides:
        # Served model names are unique per tenant (issue 34): another deployment serves its own name.
        data["served_model_name"] = overrides["name"]
    return data


def api_draft(world, **overrides) -> dict:
    data = draft(world, **overrides)
    data["flavor"] = data["flavor"].name if hasattr(data["flavor"], "name") else data["flavor"]
    data.setdefault("tenant", "alpha")
    return data


def work_after_commit(callbacks: list) -> list:
    """The on-commit callbacks a service scheduled, less the audit stream's (one per audit row)."""
    from core.models import stream_audit_event

    return [c for c in callbacks if getattr(c, "func", None) is not stream_audit_event]
