"""Row → runtime spec (deployments/specs.py): what the renderers get from a deployment row."""

from __future__ import annotations

import pytest
import yaml

from deployments import services
from deployments.specs import deployment_spec
from runtime.backends import traits as backend_traits
from tests.support.factories import draft


class TestDeploymentSpec:
    @pytest.mark.parametrize("backend", ["kuberay", "kserve"])
    def test_a_just_created_deployment_renders_to_yaml_without_a_reread(self, world, backend):
        # No dtype, quantization or backend in the draft: the row keeps the model defaults,
        # which are TextChoices members until the row is read back from the database.
        fixed = {"min_replicas": 1, "max_replicas": 1} if backend == "kserve" else {}  # KServe Standard: no autoscaling
        data = {k: v for k, v in draft(world, backend=backend, **fixed).items() if k not in ("dtype", "quantization")}
        if backend == "kuberay":
            data.pop("backend")
        dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=data)
        spec = deployment_spec(dep)
        manifest = backend_traits(spec.backend).preview(spec)
        text = yaml.safe_dump(manifest)
        assert "auto" in text
        assert yaml.safe_load(text) == manifest
        assert type(spec.engine.dtype) is str and type(spec.backend) is str
