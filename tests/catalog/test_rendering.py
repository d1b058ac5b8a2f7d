"""A pinned revision reaches the engine on every backend: vLLM's --revision (and --code-revision
when the model's own code runs) for KServe and the local engine, Ray Serve LLM's engine_kwargs
for KubeRay; the rendered objects still pass the CRD schemas. No revision: nothing rendered."""

from __future__ import annotations

from dataclasses import replace

import yaml

from runtime.backends.local.engine import local_llm_config, vllm_server_args
from runtime.manifests import kserve
from runtime.manifests.rayservice import llm_config, render_rayservice
from runtime.spec import PlatformSpec
from tests.catalog.conftest import COMMIT
from tests.runtime import test_kserve, test_manifests
from tests.support.crd import assert_valid


def test_ray_serve_llm_gets_the_revision_in_engine_kwargs_and_the_rayservice_is_valid():
    spec = test_manifests.small_spec(model_revision=COMMIT)
    assert llm_config(spec)["engine_kwargs"]["revision"] == COMMIT
    assert "code_revision" not in llm_config(spec)["engine_kwargs"]
    rayservice = render_rayservice(spec, PlatformSpec())
    assert_valid(rayservice)
    serve = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
    assert serve["applications"][0]["args"]["llm_configs"][0]["engine_kwargs"]["revision"] == COMMIT


def test_without_a_revision_nothing_is_rendered():
    spec = test_manifests.small_spec()
    assert not {"revision", "code_revision"} & set(llm_config(spec)["engine_kwargs"])
    assert not [a for a in kserve.vllm_args(test_kserve.small_spec()) if "revision" in a]


def test_remote_code_is_loaded_at_the_same_revision():
    spec = test_manifests.small_spec(model_revision="v1.0")
    spec = replace(spec, engine=replace(spec.engine, trust_remote_code=True))
    assert llm_config(spec)["engine_kwargs"]["code_revision"] == "v1.0"
    args = kserve.vllm_args(replace(test_kserve.small_spec(model_revision="v1.0"), engine=spec.engine))
    assert args[-3:] == ["--trust-remote-code", "--revision=v1.0", "--code-revision=v1.0"]


def test_kserve_passes_the_revision_to_vllm_and_the_inferenceservice_is_valid():
    spec = test_kserve.small_spec(model_revision=COMMIT)
    assert f"--revision={COMMIT}" in kserve.vllm_args(spec)
    assert_valid(kserve.render_inferenceservice(spec, PlatformSpec()))


def test_the_local_engine_gets_revision_flags():
    spec = test_manifests.small_spec(model_revision=COMMIT, backend="local")
    args = vllm_server_args(local_llm_config(spec))
    assert args[args.index("--revision") + 1] == COMMIT
