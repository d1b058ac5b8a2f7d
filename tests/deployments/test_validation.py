"""Model sources cannot climb out of their volume, bucket or model root.

A source becomes a path: `pvc://claim/p` is mounted at /models/claim/p in the worker pod, an
s3:// key is downloaded under the model directory, a local path is what the local engine opens.
Every spelling of "go up", every encoding of it and every character a path should not hold is
refused with a message naming the problem, in check_draft (shared by the API and the form),
the API (400 on `model_source`) and the browser form (the field's error).
"""

from __future__ import annotations

import os

import pytest

from deployments.models import ModelDeployment
from deployments.validation import check_draft
from tests.support.factories import api_draft, draft

CLIMBS = "may not contain '..', or empty or '.' path segments"
ENCODED = "percent-encoding"
BACKSLASH = "backslash"
CHARACTERS = "spaces, control characters or non-ASCII"
OUTSIDE = "outside the model root"
UNSUPPORTED = "Use a Hugging Face id"

# (source, what the refusal must say) for the cluster backends.
CLUSTER_ESCAPES = [
    ("pvc://models/../../etc", CLIMBS),
    ("pvc://models/llama/../../../etc/shadow", CLIMBS),
    ("pvc://models/..", CLIMBS),
    ("pvc://models/./llama", CLIMBS),
    ("pvc://models//etc", CLIMBS),
    ("pvc://claim//etc/passwd", CLIMBS),
    ("s3://bucket/../other-bucket/model", CLIMBS),
    ("s3://bucket/a/../../b", CLIMBS),
    ("s3://bucket//etc", CLIMBS),
    ("org/..", CLIMBS),
    ("../model", CLIMBS),
    ("org/model..", CLIMBS),  # the hub refuses ".." anywhere in an id
    ("pvc://models/%2e%2e/etc", ENCODED),
    ("pvc://models/%2E%2e%2fetc", ENCODED),
    ("pvc://models/%252e%252e/etc", ENCODED),
    ("s3://bucket/%2e%2e/x", ENCODED),
    ("org/%2e%2e", ENCODED),
    ("pvc://models\\..\\etc", BACKSLASH),
    ("org\\model", BACKSLASH),
    ("pvc://models/llama\x00", CHARACTERS),
    ("pvc://models/ll ama", CHARACTERS),
    ("pvc://models/llama\t", CHARACTERS),
    ("org/model\n", CHARACTERS),
    ("pvc://models/llama\r\nx", CHARACTERS),
    ("pvc://models/llama\x7f", CHARACTERS),
    ("pvc://models/ll\u2024\u2024/etc", CHARACTERS),  # ONE DOT LEADER: looks like "..", is not ASCII
    ("file:///etc/passwd", UNSUPPORTED),
    ("/etc/passwd", UNSUPPORTED),  # a local path on a cluster backend
    ("gs://bucket/../x", UNSUPPORTED),
]
CLUSTER_ACCEPTED = [
    "meta-llama/Meta-Llama-3-8B-Instruct",
    "Qwen/Qwen2.5-0.5B-Instruct",
    "s3://bucket/a/b",
    "s3://bucket/a/b/",
    "s3://my.bucket/models/v1.0=x",
    "pvc://models",
    "pvc://models/llama",
    "pvc://models/llama/v1.0/",
]


def _source_errors(world, source: str, backend: str = "kuberay") -> dict[str, str]:
    """Each field's messages as one text."""
    errors = check_draft(
        draft(world, model_source=source, backend=backend), tenant=world.alpha, with_quota=False
    ).errors
    return {name: " ".join(messages) for name, messages in errors.items()}


@pytest.fixture
def model_root(settings, tmp_path):
    """A configured LOCAL_MODEL_ROOT with one model in it and a symlink that points out."""
    root = tmp_path / "models"
    (root / "llama").mkdir(parents=True)
    (root / "org" / "llama-3.1").mkdir(parents=True)
    (tmp_path / "secrets").mkdir()
    os.symlink(tmp_path / "secrets", root / "evil")
    os.symlink(root / "llama", root / "alias")
    settings.LOCAL_MODEL_ROOT = root
    return root


class TestClusterSources:
    @pytest.mark.parametrize(("source", "says"), CLUSTER_ESCAPES, ids=[repr(s) for s, _ in CLUSTER_ESCAPES])
    def test_every_escape_is_refused_naming_the_problem(self, world, source, says):
        errors = _source_errors(world, source)
        assert says in errors.get("model_source", ""), errors

    @pytest.mark.parametrize("source", CLUSTER_ACCEPTED)
    def test_legitimate_sources_are_accepted(self, world, source):
        assert "model_source" not in _source_errors(world, source)


class TestLocalSources:
    @pytest.mark.parametrize(
        ("path", "says"),
        [
            ("/etc/passwd", OUTSIDE),
            ("{root}/../secrets", CLIMBS),
            ("{root}/llama/../../secrets", CLIMBS),
            ("{root}/./llama", CLIMBS),
            ("{root}//llama", CLIMBS),
            ("{root}", "the model root itself"),
            ("{root}/evil", OUTSIDE),  # a symlink under the root that points out of it
            ("{root}/%2e%2e/secrets", ENCODED),
            ("{root}\\..\\secrets", BACKSLASH),
            ("{root}/llama\x00", CHARACTERS),
            ("{root}/ll ama", CHARACTERS),
            ("file://{root}/llama", UNSUPPORTED),
            ("~/models/llama", UNSUPPORTED),
        ],
    )
    def test_paths_outside_the_model_root_are_refused(self, world, model_root, path, says):
        errors = _source_errors(world, path.format(root=model_root), backend="local")
        assert says in errors.get("model_source", ""), errors

    @pytest.mark.parametrize(
        "path", ["{root}/llama", "{root}/org/llama-3.1", "{root}/alias", "{root}/not-yet", "Qwen/Qwen2.5-0.5B-Instruct"]
    )
    def test_paths_under_the_root_and_hub_ids_are_accepted(self, world, model_root, path):
        assert "model_source" not in _source_errors(world, path.format(root=model_root), backend="local")


class TestWhereUsersSeeIt:
    def test_the_api_answers_400_on_model_source_and_writes_nothing(self, world):
        for source in ("pvc://models/../../etc", "s3://bucket/../x", "pvc://claim//etc"):
            response = world.client("member").post(
                "/api/v1/deployments/", api_draft(world, model_source=source), format="json"
            )
            assert response.status_code == 400, (source, response.content)
            assert CLIMBS in response.json()["model_source"][0]
        assert not ModelDeployment.objects.exists()

    def test_an_update_cannot_move_the_source_out_either(self, world):
        created = world.client("member").post("/api/v1/deployments/", api_draft(world), format="json").json()
        response = world.client("member").patch(
            f"/api/v1/deployments/{created['id']}/", {"model_source": "pvc://models/../../etc"}, format="json"
        )
        assert response.status_code == 400 and CLIMBS in response.json()["model_source"][0]
        assert ModelDeployment.objects.get().model_source == "meta-llama/Meta-Llama-3-8B-Instruct"

    def test_the_api_refuses_a_local_path_outside_the_root(self, world, model_root):
        response = world.client("member").post(
            "/api/v1/deployments/", api_draft(world, model_source="/etc/passwd", backend="local"), format="json"
        )
        assert response.status_code == 400 and OUTSIDE in response.json()["model_source"][0]

    def test_the_form_shows_the_error_on_the_field(self, world):
        data = {
            **api_draft(world, model_source="pvc://models/../../etc"),
            "tenant": world.alpha.pk,
            "flavor": world.h100.pk,
        }
        response = world.browser("member").post("/deployments/new/", data)
        assert response.status_code == 200  # the form again, not a redirect to a new deployment
        assert CLIMBS in response.context["form"].errors["model_source"][0]
        assert not ModelDeployment.objects.exists()
