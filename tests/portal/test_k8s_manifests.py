"""The portal's cluster manifests as the Helm chart (charts/llm-portal) renders them, with its
defaults and with every optional part on: RBAC is exactly what the runtime does
(runtime/k8s/permissions.py) with no wildcard, pods run as the image's non-root uid with a
read-only root, probes hit /healthz and /readyz with a Host Django accepts, every container has
requests and limits, beat is a single Recreate replica, and the Service, PDB, Ingress and
HTTPRoute reach the web pods. Needs helm from ../shared (tests.support.chart): without it these
skip with the reason; with CI set they fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.k8s import permissions
from tests.support import chart

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SECRET = ROOT / "deploy" / "k8s" / "examples" / "secret" / "secret.example.yaml"
PORTAL_UID = 10001
ALL_WITH_INGRESS = {**chart.ALL_ON, "httpRoute": {"enabled": False}, **chart.WITH_INGRESS}
CASES = {"defaults": None, "all-on": chart.ALL_ON, "all-on-ingress": ALL_WITH_INGRESS}


@pytest.fixture(autouse=True)
def _helm(request: pytest.FixtureRequest) -> None:
    if request.function is not test_the_example_secret_holds_placeholders_for_the_chart_keys:
        chart.require_helm()


@pytest.fixture(params=list(CASES))
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return chart.render(CASES[request.param])


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def component(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in of_kind(docs, kind) if d["metadata"]["labels"].get("app.kubernetes.io/component") == name]
    return found


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["spec"]
        for d in docs
        if d["kind"] in ("Deployment", "Job")
    }


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


# ---------------------------------------------------------------------------------------------
# RBAC
# ---------------------------------------------------------------------------------------------


class TestRbac:
    def test_the_cluster_role_grants_exactly_the_portal_permissions(self) -> None:
        assert chart.rules_of(chart.portal_cluster_role()) == set(permissions.PORTAL)

    @pytest.mark.parametrize("backends", [["kuberay"], ["kserve"]])
    def test_a_backend_not_offered_gets_no_grant_on_its_kind(self, backends: list[str]) -> None:
        docs = chart.render({"runtime": {"backends": backends, "defaultBackend": backends[0]}})
        (role,) = of_kind(docs, "ClusterRole")
        assert chart.rules_of(role) == set(permissions.portal(backends))

    def test_the_optional_grants_are_exactly_readiness_and_keys(self) -> None:
        readiness = set().union(*(chart.rules_of(d) for d in chart.readiness_rbac() if "rules" in d))
        assert readiness == set(permissions.READINESS)
        (keys,) = [d for d in chart.api_keys_rbac("kuadrant-system") if d["kind"] == "Role"]
        assert chart.rules_of(keys) == set(permissions.KEYS)
        # Kueue's own objects by name, in Kueue's namespace only; Secrets in the key namespace only.
        (kueue,) = [d for d in chart.readiness_rbac() if d["kind"] == "Role"]
        assert kueue["metadata"]["namespace"] == "kueue-system"
        assert all(rule["resourceNames"] for rule in kueue["rules"])
        assert keys["metadata"]["namespace"] == "kuadrant-system"

    def test_no_rule_has_a_wildcard(self, rendered: list[dict[str, Any]]) -> None:
        for doc in rendered:
            for rule in doc.get("rules", []):
                for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in rule.get(field, []), (doc["metadata"]["name"], rule)
                assert "nonResourceURLs" not in rule

    def test_every_binding_names_the_release_service_account(self, rendered: list[dict[str, Any]]) -> None:
        (account,) = of_kind(rendered, "ServiceAccount")
        roles = {(d["kind"], d["metadata"]["name"]) for d in rendered if d["kind"] in ("ClusterRole", "Role")}
        bindings = [d for d in rendered if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
        assert bindings
        for binding in bindings:
            assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in roles
            (subject,) = binding["subjects"]
            assert subject == {
                "kind": "ServiceAccount",
                "name": account["metadata"]["name"],
                "namespace": chart.NAMESPACE,
            }

    def test_workloads_that_call_the_cluster_use_the_bound_account(self, rendered: list[dict[str, Any]]) -> None:
        (account,) = of_kind(rendered, "ServiceAccount")
        for name in ("web", "worker", "beat"):
            pod = component(rendered, "Deployment", name)["spec"]["template"]["spec"]
            assert pod["serviceAccountName"] == account["metadata"]["name"]
        migrate = component(rendered, "Job", "migrate")["spec"]["template"]["spec"]
        assert migrate["automountServiceAccountToken"] is False


# ---------------------------------------------------------------------------------------------
# Pods
# ---------------------------------------------------------------------------------------------


class TestPods:
    def test_every_pod_runs_as_the_image_non_root_uid_read_only(self, rendered: list[dict[str, Any]]) -> None:
        """Pod Security `restricted` (docs/install.md, step 4), and a read-only root: what the app
        writes goes to /tmp (gunicorn's heartbeat files), a memory-backed emptyDir."""
        pods = pod_specs(rendered)
        assert len(pods) == 4
        for name, pod in pods.items():
            assert pod["securityContext"]["runAsNonRoot"] is True, name
            assert pod["securityContext"]["runAsUser"] == PORTAL_UID, name
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
            for container in containers(pod):
                context = container["securityContext"]
                assert context["allowPrivilegeEscalation"] is False, name
                assert context["readOnlyRootFilesystem"] is True, name
                assert context["capabilities"]["drop"] == ["ALL"], name

    def test_every_container_has_cpu_and_memory_requests_and_limits(self, rendered: list[dict[str, Any]]) -> None:
        for name, pod in pod_specs(rendered).items():
            for container in containers(pod):
                for kind in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(container["resources"][kind]), (name, container["name"])

    def test_long_running_containers_read_the_config_map(self, rendered: list[dict[str, Any]]) -> None:
        (config,) = of_kind(rendered, "ConfigMap")
        for name in ("web", "worker", "beat"):
            pod = component(rendered, "Deployment", name)["spec"]["template"]["spec"]
            for container in containers(pod):
                assert container["envFrom"] == [{"configMapRef": {"name": config["metadata"]["name"]}}]
            # A changed setting rolls the pods.
            annotations = component(rendered, "Deployment", name)["spec"]["template"]["metadata"]["annotations"]
            assert len(annotations["checksum/config"]) == 64

    def test_web_probes_health_and_readiness_with_an_allowed_host(self, rendered: list[dict[str, Any]]) -> None:
        (config,) = of_kind(rendered, "ConfigMap")
        allowed = config["data"]["ALLOWED_HOSTS"].split(",")
        (web,) = component(rendered, "Deployment", "web")["spec"]["template"]["spec"]["containers"]
        ports = {port["name"] for port in web["ports"]}
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = web[probe]["httpGet"]
            assert (get["path"], get["port"] in ports) == (path, True)
            (host,) = [h["value"] for h in get["httpHeaders"] if h["name"] == "Host"]
            assert host in allowed, f"{probe}: Django answers 400 to Host {host!r}"

    def test_worker_liveness_pings_its_own_celery_node(self, rendered: list[dict[str, Any]]) -> None:
        (worker,) = component(rendered, "Deployment", "worker")["spec"]["template"]["spec"]["containers"]
        command = " ".join(worker["livenessProbe"]["exec"]["command"])
        assert "inspect ping" in command and "celery@$HOSTNAME" in command

    def test_beat_is_one_replica_replaced_not_rolled(self, rendered: list[dict[str, Any]]) -> None:
        beat = component(rendered, "Deployment", "beat")
        assert (beat["spec"]["replicas"], beat["spec"]["strategy"]) == (1, {"type": "Recreate"})

    @pytest.mark.parametrize("name", ["web", "worker", "beat"])
    def test_long_running_pods_wait_for_migrations(self, rendered: list[dict[str, Any]], name: str) -> None:
        (init,) = component(rendered, "Deployment", name)["spec"]["template"]["spec"]["initContainers"]
        assert "migrate --check" in " ".join(init["command"])

    def test_the_migration_job_can_read_the_first_platform_admins_password(self) -> None:
        """PLATFORM_ADMIN_PASSWORD_FILE (applied after every migrate) is a Secret-mounted file: the
        Job mounts an optional Secret where deploy/env.example says, read-only, so no one needs a
        shell in the cluster to make the first platform admin."""
        docs = chart.render(chart.ALL_ON)
        pod = component(docs, "Job", "migrate")["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        (mount,) = container["volumeMounts"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"] == {"secretName": "llm-portal-platform-admin", "optional": True, "defaultMode": 0o400}
        assert mount["readOnly"] and mount["mountPath"] == "/run/secrets/platform-admin"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["PLATFORM_ADMIN_PASSWORD_FILE"] == f"{mount['mountPath']}/password"
        assert env["PLATFORM_ADMIN_USERNAME"] == "root"
        example = (ROOT / "deploy" / "env.example").read_text()
        assert f"PLATFORM_ADMIN_PASSWORD_FILE={mount['mountPath']}/password" in example

    def test_all_pods_run_the_one_pinned_image(self, rendered: list[dict[str, Any]]) -> None:
        images = {c["image"] for pod in pod_specs(rendered).values() for c in containers(pod)}
        assert images == {"llm-portal:0.1.0"}
        image = {"image": {"repository": "ghcr.io/acme/llm-portal", "tag": "0.1.0"}}
        pods = pod_specs(chart.render(image)).values()
        assert {c["image"] for pod in pods for c in containers(pod)} == {"ghcr.io/acme/llm-portal:0.1.0"}

    def test_replicas_and_resources_come_from_the_values(self) -> None:
        values = {
            "web": {"replicas": 3},
            "worker": {
                "replicas": 5,
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}},
            },
        }
        docs = chart.render(values)
        assert component(docs, "Deployment", "web")["spec"]["replicas"] == 3
        worker = component(docs, "Deployment", "worker")
        assert worker["spec"]["replicas"] == 5
        assert worker["spec"]["template"]["spec"]["containers"][0]["resources"] == values["worker"]["resources"]


# ---------------------------------------------------------------------------------------------
# The portal's own exposure
# ---------------------------------------------------------------------------------------------


class TestWebExposure:
    def test_service_pdb_ingress_and_route_reach_the_web_pods(self, rendered: list[dict[str, Any]]) -> None:
        web = component(rendered, "Deployment", "web")
        labels = web["spec"]["template"]["metadata"]["labels"]
        (service,) = of_kind(rendered, "Service")
        (pdb,) = of_kind(rendered, "PodDisruptionBudget")
        assert service["spec"]["selector"].items() <= labels.items()
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
        (port,) = service["spec"]["ports"]
        (container,) = web["spec"]["template"]["spec"]["containers"]
        assert port["targetPort"] in {p["name"] for p in container["ports"]}
        for ingress in of_kind(rendered, "Ingress"):
            backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
            assert backend == {"name": service["metadata"]["name"], "port": {"name": port["name"]}}
            assert ingress["spec"]["tls"] == [{"hosts": ["portal.example.com"], "secretName": "llm-portal-tls"}]
        for route in of_kind(rendered, "HTTPRoute"):
            (backend,) = route["spec"]["rules"][0]["backendRefs"]
            assert backend == {"name": service["metadata"]["name"], "port": port["port"]}
            assert route["spec"]["hostnames"] == ["portal.example.com"]
        for monitor in of_kind(rendered, "ServiceMonitor"):
            assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()

    def test_pdb_never_blocks_a_drain(self, rendered: list[dict[str, Any]]) -> None:
        (pdb,) = of_kind(rendered, "PodDisruptionBudget")
        # minAvailable 1 with a single replica would make every node drain hang.
        assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]

    def test_network_policies_admit_only_the_web_port(self) -> None:
        docs = chart.render(chart.ALL_ON)
        policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(docs, "NetworkPolicy")}
        web = policies["llm-portal-web"]
        assert web["ingress"] == [
            {"ports": [{"port": "http", "protocol": "TCP"}], "from": chart.ALL_ON["networkPolicy"]["webFrom"]}
        ]
        closed = policies["llm-portal-no-ingress"]
        assert (closed["policyTypes"], closed.get("ingress")) == (["Ingress"], None)
        (components,) = closed["podSelector"]["matchExpressions"]
        assert set(components["values"]) == {"worker", "beat", "migrate"}


# ---------------------------------------------------------------------------------------------
# The example Secret
# ---------------------------------------------------------------------------------------------


def test_the_example_secret_holds_placeholders_for_the_chart_keys() -> None:
    """The keys the chart requires by default, placeholders only (files alone: no helm needed)."""
    (secret,) = [d for d in yaml.safe_load_all(EXAMPLE_SECRET.read_text()) if d]
    values = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    required = {ref["key"] for ref in values["secrets"].values() if not ref.get("optional")}
    assert {ref["secretName"] for ref in values["secrets"].values()} == {secret["metadata"]["name"]}
    assert set(secret["stringData"]) == required
    for key, value in secret["stringData"].items():
        assert "CHANGE-ME" in value, f"{key} looks like a real value"
    assert "placeholder" in secret["metadata"]["annotations"]["llm-portal.io/example"]
