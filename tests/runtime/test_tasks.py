"""Tasks (runtime.tasks) as each engine gets them: the Ray Serve LLM config (kuberay and the local
Serve app), vLLM's OpenAI server flags (local) and the InferenceService's args (kserve), each
rendered object still valid against the real CRD schema."""

from __future__ import annotations

from dataclasses import replace

import pytest

from catalog.choices import Task
from runtime import tasks
from runtime.backends.local.engine import local_llm_config, vllm_server_args
from runtime.manifests import kserve
from runtime.manifests.rayservice import llm_config, render_rayservice
from runtime.spec import PlatformSpec
from tests.runtime.test_kserve import container, small_spec
from tests.support.crd import assert_valid

POOLING = {"embedding": {"runner": "pooling", "convert": "embed"}, "score": {"runner": "pooling"}}


def test_the_catalog_offers_exactly_the_runtimes_tasks_with_its_labels():
    assert [(t.value, t.label) for t in Task] == [(name, f.label) for name, f in tasks.TASKS.items()]


@pytest.mark.parametrize("task", sorted(tasks.TASKS))
def test_ray_serve_llm_gets_the_runner_and_nothing_else_changes(task):
    chat = llm_config(small_spec())["engine_kwargs"]
    kwargs = llm_config(small_spec(task=task))["engine_kwargs"]
    expected = dict(chat) | POOLING.get(task, {})
    if task in POOLING:  # chunked prefill is vLLM's to decide for a pooling model
        del expected["enable_chunked_prefill"]
    assert kwargs == expected


@pytest.mark.parametrize("task", sorted(POOLING))
def test_the_rayservice_of_a_pooling_deployment_is_valid_against_the_crd(task):
    assert_valid(render_rayservice(small_spec(task=task), PlatformSpec()))


def test_the_local_vllm_server_gets_the_flags():
    args = vllm_server_args(local_llm_config(small_spec(task="embedding")))
    assert args[args.index("--runner") + 1] == "pooling" and args[args.index("--convert") + 1] == "embed"
    assert not any("chunked-prefill" in arg for arg in args)
    score = vllm_server_args(local_llm_config(small_spec(task="score")))
    assert score[score.index("--runner") + 1] == "pooling" and "--convert" not in score
    chat = vllm_server_args(local_llm_config(small_spec()))
    assert "--runner" not in chat and "--enable-chunked-prefill" in chat


@pytest.mark.parametrize(
    ("task", "flags"),
    [
        ("chat", ["--enable-chunked-prefill"]),
        ("completion", ["--enable-chunked-prefill"]),
        ("embedding", ["--runner=pooling", "--convert=embed"]),
        ("score", ["--runner=pooling"]),
    ],
)
def test_the_inferenceservice_args(task, flags):
    platform = PlatformSpec(kserve_deployment_mode="Standard")
    isvc = kserve.render_inferenceservice(small_spec(task=task), platform)
    args = container(isvc)["args"]
    chat_args = container(kserve.render_inferenceservice(small_spec(), platform))["args"]
    assert [a for a in args if a not in chat_args] == [f for f in flags if f not in chat_args]
    assert [a for a in chat_args if a not in args] == (
        [] if task in ("chat", "completion") else ["--enable-chunked-prefill"]
    )
    assert_valid(isvc)


def test_an_unknown_task_is_a_key_error_not_a_silent_default():
    with pytest.raises(KeyError):
        tasks.engine_kwargs("translate")
    with pytest.raises(KeyError):
        llm_config(replace(small_spec(), task="translate"))
