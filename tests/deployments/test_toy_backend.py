"""A backend is one package and one registry entry (issue 39).

A toy fourth backend is registered with one `register` call (the fixture, plus the install's
RUNTIME_BACKENDS listing it, which is a setting, not an edit) and shows up, with no other change,
in the request form, the API (field, OpenAPI enum, filter), the readiness checks (its API group,
its Kueue integration), the portal's RBAC (grants and the rendered ClusterRole), the Gateway
route target and the sweep. Each assertion names the toy and fails if any of those still keeps a
list of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from deployments.forms import DeploymentForm
from deployments.models import ModelDeployment
from deployments.sweep import sweep
from runtime import backends, k8s
from runtime.backends import ClusterKind, Traits, register, unregister
from runtime.backends.base import ClusterObjectBackend
from runtime.k8s.permissions import cluster_role, portal
from runtime.manifests.gateway import backend_service
from runtime.readiness import check_apis, check_kueue_integrations, check_permissions
from runtime.readiness_base import ReadinessConfig
from runtime.status import Observation
from tests.support.factories import api_draft

TOY = k8s.Kind("toy.example.com", "v1", "toyservices", "ToyService")


class ToyBackend(ClusterObjectBackend):
    """Applies one ToyService per deployment; ready as soon as it exists."""

    name = "toy"
    kind = TOY

    def desired(self, spec) -> dict[str, Any]:
        return {"apiVersion": TOY.api_version, "kind": TOY.kind, "metadata": {"name": spec.name}, "spec": {}}

    def ensure(self, spec) -> Observation:
        self.cluster.apply({**self.desired(spec), "metadata": {"name": spec.name, "namespace": spec.namespace}})
        return self.observe(spec)

    def status(self, spec, obj: dict, workload: dict | None) -> Observation:
        return Observation(exists=True, state="ready", reason="Toy", converged=True)


@pytest.fixture
def toy(settings):
    """The one line that adds a backend (here spread over lines for reading), and the setting
    that offers it."""
    register(
        "toy",
        lambda: ToyBackend(backends.get_cluster(), None),
        Traits(
            label="Toy operator",
            preview=lambda spec: {"kind": "ToyService", "name": spec.name},
            kind=ClusterKind(
                product="Toy", group="toy.example.com", version="v1", plural="toyservices", install="install Toy"
            ),
            route=lambda spec: (f"{spec.name}-toy", 9000),
            kueue_frameworks=("toy.example.com/toyservice",),
        ),
    )
    settings.RUNTIME_BACKENDS = [*settings.RUNTIME_BACKENDS, "toy"]
    yield
    unregister("toy")


def test_it_is_a_choice_in_the_request_form(world, toy):
    choices = dict(DeploymentForm(user=world.users["member"]).fields["backend"].choices)
    assert choices["toy"] == "Toy operator"


def test_the_api_takes_it_lists_it_in_the_schema_and_filters_by_it(world, toy):
    member = world.client("member")
    created = member.post("/api/v1/deployments/", api_draft(world, backend="toy"), format="json")
    assert created.status_code == 201, created.json()
    assert ModelDeployment.objects.get(pk=created.json()["id"]).backend == "toy"
    listed = member.get("/api/v1/deployments/", {"backend": "toy"}).json()["results"]
    assert [d["id"] for d in listed] == [created.json()["id"]]
    schema = member.get("/api/schema/", {"format": "json"}).json()
    enum = schema["components"]["schemas"]["BackendEnum"]["enum"]
    assert "toy" in enum


def test_without_it_the_api_refuses_it_on_its_field(world):
    answer = world.client("member").post("/api/v1/deployments/", api_draft(world, backend="toy"), format="json")
    assert answer.status_code == 400 and "backend" in answer.json()


def test_readiness_looks_for_its_api_and_its_kueue_integration(world, toy, cluster_api):
    config = ReadinessConfig(backends=("kuberay", "toy"))
    apis = {c.key: c for c in check_apis(backends.get_cluster(), config)}
    assert apis["api:toy.example.com"].status == "amber"
    assert apis["api:toy.example.com"].fix == "Either install Toy, or remove toy from RUNTIME_BACKENDS."
    kueue = {c.key: c for c in check_kueue_integrations(backends.get_cluster(), config)}
    assert "toy.example.com/toyservice" in kueue["kueue:toyservice"].fix
    granted = {c.key: c for c in check_permissions(backends.get_cluster(), config)}
    # One access review per grant it needs, the toy's five included.
    assert granted["rbac:portal"].detail == f"All {len(portal(['kuberay', 'toy']))} granted."
    assert len(portal(["kuberay", "toy"])) == len(portal(["kuberay"])) + 5


def test_rbac_grants_and_renders_its_kind(toy):
    grants = portal()
    assert {("get", "toy.example.com", "toyservices"), ("delete", "toy.example.com", "toyservices")} <= set(grants)
    rules = cluster_role("llm-portal")["rules"]
    assert {"apiGroups": ["toy.example.com"], "resources": ["toyservices"], "verbs": list(backends.KIND_VERBS)} in (
        rules
    )
    assert not any("toyservices" in rule["resources"] for rule in cluster_role("llm-portal", ["kuberay"])["rules"])


def test_the_gateway_routes_to_its_service(world, toy):
    from deployments.specs import deployment_spec

    created = world.client("member").post("/api/v1/deployments/", api_draft(world, backend="toy"), format="json")
    spec = deployment_spec(ModelDeployment.objects.get(pk=created.json()["id"]))
    assert backend_service(spec) == (f"{spec.name}-toy", 9000)


def test_the_sweep_visits_it(world, toy, cluster_api):
    assert sweep()["not_installed"] == ["toy"]  # the emulator does not serve toy.example.com
    cluster_api.declare(TOY.key, TOY.kind)
    assert sweep()["not_installed"] == []
    assert backends.presence()["toy"]["installed"] is True


def test_each_built_in_backend_applies_the_kind_its_entry_names():
    """The registry's ClusterKind (readiness, RBAC) and the backend class's kind are one."""
    from runtime.backends.kserve import KServeBackend
    from runtime.backends.kuberay import KubeRayBackend

    for cls in (KubeRayBackend, KServeBackend):
        kind = backends.traits(cls.name).kind
        assert (kind.group, kind.version, kind.plural) == (cls.kind.group, cls.kind.version, cls.kind.plural)
    assert backends.names(on_cluster=False) == ["local"]
