"""deploy/k8s: the portal's kustomize base and overlays, read as YAML and (where kubectl is
installed) built with `kubectl kustomize`.

Every file is loaded directly, so the checks run without any binary: RBAC is exactly what
the portal does and has no wildcard, probes hit /healthz and /readyz with a Host Django
accepts, every container has requests and limits, pods run as the image's non-root uid,
beat is a single Recreate replica. With kubectl present the same checks run on each
overlay's built output, which also proves the references kustomize rewrites (name prefix,
namespace, ClusterRoleBinding subject) still line up.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.portal.test_compose import settings_env_names

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
BASE = K8S / "base"
OVERLAYS = ("dev", "prod")
PORTAL_UID = 10001

# The same rules tests/portal/test_rbac.py derives from the runtime's recorded API calls; this
# copy checks the *built* overlays keep them (kustomize must not add or drop any).
VERBS_WORKLOAD = {"get", "list", "create", "patch", "delete"}
VERBS_KUEUE = {"get", "create", "patch"}
VERBS_OWNED = {"get", "list", "create", "patch", "delete"}  # one per flavor; stale ones deleted
EXPECTED_RULES = {
    ("ray.io", "rayservices"): VERBS_WORKLOAD,
    ("serving.kserve.io", "inferenceservices"): VERBS_WORKLOAD,
    ("kueue.x-k8s.io", "clusterqueues"): VERBS_KUEUE,
    ("kueue.x-k8s.io", "localqueues"): VERBS_KUEUE,
    ("kueue.x-k8s.io", "resourceflavors"): VERBS_KUEUE,
    ("kueue.x-k8s.io", "cohorts"): VERBS_KUEUE,
    ("kueue.x-k8s.io", "workloads"): {"list", "delete"},
    ("visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads"): {"get"},
    ("", "namespaces"): {"get", "create", "patch"},
    ("", "pods"): {"list"},
    ("", "events"): {"list"},
    ("", "pods/log"): {"get"},
    ("kueue.x-k8s.io", "topologies"): VERBS_OWNED,
    ("karpenter.sh", "nodepools"): VERBS_OWNED,
    ("karpenter.k8s.aws", "ec2nodeclasses"): VERBS_OWNED,
    # Endpoint access: applied and deleted; AuthPolicies read for their status (API-key Secrets:
    # deploy/k8s/gateway's Role).
    ("gateway.networking.k8s.io", "httproutes"): {"create", "patch", "delete"},
    ("kuadrant.io", "authpolicies"): {"get", "create", "patch", "delete"},  # get: enforced yet?
    ("kuadrant.io", "tokenratelimitpolicies"): {"create", "patch", "delete"},
    ("kuadrant.io", "ratelimitpolicies"): {"create", "patch", "delete"},
}
SECRET_KEYS = {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL"}


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_docs(path: Path) -> list[dict[str, Any]]:
    with path.open() as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc]


def yaml_files() -> list[Path]:
    return sorted(K8S.rglob("*.yaml"))


def kustomizations() -> dict[Path, dict[str, Any]]:
    return {path.parent: load_docs(path)[0] for path in K8S.rglob("kustomization.yaml")}


def patch_files() -> set[Path]:
    return {
        (directory / patch["path"]).resolve()
        for directory, kustomization in kustomizations().items()
        for patch in kustomization.get("patches", [])
        if "path" in patch
    }


def resources_of(directory: Path) -> list[dict[str, Any]]:
    """The resources a kustomization lists, recursively, as written (no patches applied)."""
    docs: list[dict[str, Any]] = []
    for entry in kustomizations()[directory].get("resources", []):
        target = (directory / entry).resolve()
        docs += resources_of(target) if target.is_dir() else load_docs(target)
    return docs


def kustomize_build(overlay: str) -> list[dict[str, Any]]:
    """`kubectl kustomize overlays/<overlay>` parsed (skips where kubectl is not installed)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed; the direct YAML checks cover the files")
    return [doc for doc in yaml.safe_load_all(_build(kubectl, overlay)) if doc]


@functools.cache
def _build(kubectl: str, overlay: str) -> str:
    result = subprocess.run(
        [kubectl, "kustomize", str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc.get("kind") == kind]


def component(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [
        doc
        for doc in of_kind(docs, kind)
        if doc["metadata"].get("labels", {}).get("app.kubernetes.io/component") == name
    ]
    return found


def pod_specs(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in docs:
        if doc.get("kind") in ("Deployment", "Job", "StatefulSet", "DaemonSet", "CronJob"):
            template = doc["spec"]["template"]
            if doc["kind"] == "CronJob":
                template = doc["spec"]["jobTemplate"]["spec"]["template"]
            yield f"{doc['kind']}/{doc['metadata']['name']}", template["spec"]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def rule_map(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    rules: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                rules.setdefault((group, resource), set()).update(rule["verbs"])
    return rules


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return resources_of(BASE)


@pytest.fixture(scope="module", params=["base", *OVERLAYS])
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """The base as written, then each overlay as kustomize builds it."""
    if request.param == "base":
        return resources_of(BASE)
    return kustomize_build(request.param)


# ---------------------------------------------------------------------------------------------
# Every file
# ---------------------------------------------------------------------------------------------


class TestFiles:
    def test_every_yaml_file_parses_into_typed_documents(self) -> None:
        files = yaml_files()
        assert len(files) >= 15
        for path in files:
            docs = load_docs(path)
            assert docs, f"{path} is empty"
            for doc in docs:
                assert doc.get("apiVersion") and doc.get("kind"), path

    def test_every_reference_in_a_kustomization_exists(self) -> None:
        for directory, kustomization in kustomizations().items():
            for entry in kustomization.get("resources", []):
                target = (directory / entry).resolve()
                assert target.is_file() or (target / "kustomization.yaml").is_file(), (
                    f"{directory}: resource {entry} does not exist"
                )
            for patch in kustomization.get("patches", []):
                assert (directory / patch["path"]).is_file(), f"{directory}: {patch}"

    def test_no_manifest_is_left_out_of_every_kustomization(self) -> None:
        # A file nothing references is never deployed, however correct it looks.
        referenced = set(patch_files())
        for directory, kustomization in kustomizations().items():
            referenced |= {
                (directory / entry).resolve()
                for entry in kustomization.get("resources", [])
                if (directory / entry).is_file()
            }
        orphans = {
            path.resolve()
            for path in yaml_files()
            if path.name != "kustomization.yaml" and path.resolve() not in referenced
        }
        assert not orphans

    def test_no_wildcard_in_any_rbac_rule_in_any_file(self) -> None:
        for path in yaml_files():
            for doc in load_docs(path):
                for rule in doc.get("rules", []) or []:
                    for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                        assert "*" not in rule.get(field, []), f"{path}: {rule}"
                    assert "nonResourceURLs" not in rule, f"{path}: {rule}"

    def test_no_file_raises_beat_above_one_replica(self) -> None:
        for path in yaml_files():
            for doc in load_docs(path):
                if doc.get("kind") == "Kustomization":
                    for entry in doc.get("replicas", []):
                        assert "beat" not in entry["name"], f"{path} scales beat"
                elif "beat" in doc.get("metadata", {}).get("name", ""):
                    assert doc.get("spec", {}).get("replicas", 1) == 1, path
                    strategy = doc.get("spec", {}).get("strategy", {"type": "Recreate"})
                    assert strategy["type"] == "Recreate", path


# ---------------------------------------------------------------------------------------------
# Base as written, and each overlay as built
# ---------------------------------------------------------------------------------------------


class TestRbac:
    def test_cluster_role_is_exactly_what_the_portal_does(self, rendered: list[dict[str, Any]]) -> None:
        (role,) = of_kind(rendered, "ClusterRole")
        assert rule_map(role) == EXPECTED_RULES
        assert not of_kind(rendered, "Role")

    def test_binding_grants_the_role_to_the_portal_service_account(self, rendered: list[dict[str, Any]]) -> None:
        (role,) = of_kind(rendered, "ClusterRole")
        (binding,) = of_kind(rendered, "ClusterRoleBinding")
        (account,) = of_kind(rendered, "ServiceAccount")
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": role["metadata"]["name"],
        }
        (subject,) = binding["subjects"]
        assert subject["kind"] == "ServiceAccount"
        assert subject["name"] == account["metadata"]["name"]
        # The base leaves "default" for kustomize to replace; built, it is the overlay's.
        assert subject["namespace"] == account["metadata"].get("namespace", "default")

    def test_workloads_that_call_the_cluster_use_the_bound_account(self, rendered: list[dict[str, Any]]) -> None:
        (account,) = of_kind(rendered, "ServiceAccount")
        for name in ("web", "worker", "beat"):
            pod = component(rendered, "Deployment", name)["spec"]["template"]["spec"]
            assert pod["serviceAccountName"] == account["metadata"]["name"]
        migrate = component(rendered, "Job", "migrate")["spec"]["template"]["spec"]
        assert migrate["automountServiceAccountToken"] is False


class TestPods:
    def test_every_pod_runs_as_the_image_non_root_uid(self, rendered: list[dict[str, Any]]) -> None:
        pods = dict(pod_specs(rendered))
        assert len(pods) == 4
        for name, pod in pods.items():
            context = pod["securityContext"]
            assert context["runAsNonRoot"] is True, name
            assert context["runAsUser"] == PORTAL_UID, name
            for container in containers(pod):
                assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
                assert container["securityContext"]["capabilities"]["drop"] == ["ALL"], name

    def test_every_container_has_cpu_and_memory_requests_and_limits(self, rendered: list[dict[str, Any]]) -> None:
        for name, pod in pod_specs(rendered):
            for container in containers(pod):
                resources = container["resources"]
                for kind in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(resources[kind]), (name, container["name"])

    def test_every_container_reads_the_config_and_the_secret(self, rendered: list[dict[str, Any]]) -> None:
        configmaps = {doc["metadata"]["name"] for doc in of_kind(rendered, "ConfigMap")}
        for name, pod in pod_specs(rendered):
            for container in containers(pod):
                refs = container["envFrom"]
                assert refs[0]["configMapRef"]["name"] in configmaps, name
                assert refs[1]["secretRef"]["name"].endswith("llm-portal-secrets"), name

    def test_web_probes_health_and_readiness_with_an_allowed_host(self, rendered: list[dict[str, Any]]) -> None:
        (config,) = of_kind(rendered, "ConfigMap")
        allowed = config["data"]["ALLOWED_HOSTS"].split(",")
        pod = component(rendered, "Deployment", "web")["spec"]["template"]["spec"]
        (web,) = pod["containers"]
        ports = {port["name"] for port in web["ports"]}
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = web[probe]["httpGet"]
            assert get["path"] == path
            assert get["port"] in ports
            (host,) = [h["value"] for h in get["httpHeaders"] if h["name"] == "Host"]
            assert host in allowed, f"{probe}: Django answers 400 to Host {host!r}"

    def test_worker_liveness_pings_its_own_celery_node(self, rendered: list[dict[str, Any]]) -> None:
        pod = component(rendered, "Deployment", "worker")["spec"]["template"]["spec"]
        (worker,) = pod["containers"]
        command = " ".join(worker["livenessProbe"]["exec"]["command"])
        assert "inspect ping" in command and "celery@$HOSTNAME" in command

    def test_beat_is_one_replica_replaced_not_rolled(self, rendered: list[dict[str, Any]]) -> None:
        beat = component(rendered, "Deployment", "beat")
        assert beat["spec"]["replicas"] == 1
        assert beat["spec"]["strategy"] == {"type": "Recreate"}

    @pytest.mark.parametrize("name", ["web", "worker", "beat"])
    def test_long_running_pods_wait_for_migrations(self, rendered: list[dict[str, Any]], name: str) -> None:
        pod = component(rendered, "Deployment", name)["spec"]["template"]["spec"]
        (init,) = pod["initContainers"]
        assert "migrate --check" in " ".join(init["command"])

    def test_the_migration_job_migrates_once(self, rendered: list[dict[str, Any]]) -> None:
        job = component(rendered, "Job", "migrate")
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"

    def test_the_migration_job_can_read_the_first_platform_admins_password(self, rendered) -> None:
        """PLATFORM_ADMIN_PASSWORD_FILE (applied after every migrate) is a Secret-mounted file: the
        Job mounts an optional Secret where deploy/env.example says, read-only, so no one needs a
        shell in the cluster to make the first platform admin."""
        pod = component(rendered, "Job", "migrate")["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        (mount,) = container["volumeMounts"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"] == {
            "secretName": "llm-portal-platform-admin",
            "optional": True,
            "defaultMode": 0o400,
        }
        assert mount["readOnly"] and mount["mountPath"] == "/run/secrets/platform-admin"
        example = (ROOT / "deploy" / "env.example").read_text()
        assert f"PLATFORM_ADMIN_PASSWORD_FILE={mount['mountPath']}/password" in example

    def test_all_pods_run_one_image(self, rendered: list[dict[str, Any]]) -> None:
        images = {c["image"] for _, pod in pod_specs(rendered) for c in containers(pod)}
        assert len(images) == 1


class TestWebExposure:
    def test_service_pdb_and_ingress_reach_the_web_pods(self, rendered: list[dict[str, Any]]) -> None:
        web = component(rendered, "Deployment", "web")
        labels = web["spec"]["template"]["metadata"]["labels"]
        (service,) = of_kind(rendered, "Service")
        (pdb,) = of_kind(rendered, "PodDisruptionBudget")
        (ingress,) = of_kind(rendered, "Ingress")
        assert service["spec"]["selector"].items() <= labels.items()
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
        (port,) = service["spec"]["ports"]
        (container,) = web["spec"]["template"]["spec"]["containers"]
        assert port["targetPort"] in {p["name"] for p in container["ports"]}
        backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
        assert backend == {"name": service["metadata"]["name"], "port": {"name": port["name"]}}

    def test_pdb_never_blocks_a_drain(self, rendered: list[dict[str, Any]]) -> None:
        (pdb,) = of_kind(rendered, "PodDisruptionBudget")
        # minAvailable 1 with a single replica would make every node drain hang.
        assert pdb["spec"] == {**pdb["spec"], "maxUnavailable": 1}
        assert "minAvailable" not in pdb["spec"]


class TestConfiguration:
    def test_config_map_sets_only_what_settings_read_and_no_secret(self, base: list[dict[str, Any]]) -> None:
        (config,) = of_kind(base, "ConfigMap")
        keys = set(config["data"])
        assert keys <= settings_env_names(), keys - settings_env_names()
        assert not keys & SECRET_KEYS

    def test_example_secret_is_a_placeholder_with_the_keys_settings_read(self) -> None:
        (secret,) = resources_of(K8S / "examples" / "secret")
        assert secret["kind"] == "Secret"
        assert set(secret["stringData"]) == SECRET_KEYS
        assert SECRET_KEYS <= settings_env_names()
        for key, value in secret["stringData"].items():
            assert "CHANGE-ME" in value, f"{key} looks like a real value"
        assert "placeholder" in secret["metadata"]["annotations"]["llm-portal.io/example"]

    def test_only_the_dev_overlay_ships_the_example_secret(self) -> None:
        users = {
            directory.relative_to(K8S).as_posix()
            for directory, kustomization in kustomizations().items()
            for entry in kustomization.get("resources", [])
            if entry.rstrip("/").endswith("examples/secret")
        }
        assert users == {"overlays/dev"}
        assert not of_kind(resources_of(BASE), "Secret")

    @pytest.mark.parametrize("overlay", OVERLAYS)
    def test_overlay_patches_target_base_objects_and_known_settings(self, overlay: str) -> None:
        directory = K8S / "overlays" / overlay
        base_names = {(d["kind"], d["metadata"]["name"]) for d in resources_of(BASE)}
        for patch in kustomizations()[directory].get("patches", []):
            for doc in load_docs(directory / patch["path"]):
                assert (doc["kind"], doc["metadata"]["name"]) in base_names, patch
                if doc["kind"] == "ConfigMap":
                    assert set(doc["data"]) <= settings_env_names()
                    assert "localhost" in doc["data"]["ALLOWED_HOSTS"].split(",")

    @pytest.mark.parametrize("overlay", OVERLAYS)
    def test_overlay_sets_a_namespace_and_a_pinned_image(self, overlay: str) -> None:
        kustomization = kustomizations()[K8S / "overlays" / overlay]
        namespace = kustomization["namespace"]
        (own,) = load_docs(K8S / "overlays" / overlay / "namespace.yaml")
        assert (own["kind"], own["metadata"]["name"]) == ("Namespace", namespace)
        (image,) = kustomization["images"]
        assert image["name"] == "llm-portal"
        assert image["newTag"] and image["newTag"] != "latest"


class TestBuiltOverlays:
    """Only what kustomize's rewriting can break; the shared checks above also run built."""

    @pytest.mark.parametrize("overlay", OVERLAYS)
    def test_every_namespaced_object_lands_in_the_overlay_namespace(self, overlay: str) -> None:
        docs = kustomize_build(overlay)
        namespace = kustomizations()[K8S / "overlays" / overlay]["namespace"]
        cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
        for doc in docs:
            if doc["kind"] not in cluster_scoped:
                assert doc["metadata"]["namespace"] == namespace, doc["metadata"]["name"]
        (binding,) = of_kind(docs, "ClusterRoleBinding")
        assert binding["subjects"][0]["namespace"] == namespace

    def test_dev_and_prod_cluster_scoped_names_do_not_collide(self) -> None:
        def names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
            return {
                (d["kind"], d["metadata"]["name"])
                for d in docs
                if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Namespace")
            }

        assert not names(kustomize_build("dev")) & names(kustomize_build("prod"))

    def test_prod_is_replicated_and_dev_is_small(self) -> None:
        for overlay, expected in (("dev", 1), ("prod", 3)):
            docs = kustomize_build(overlay)
            for name in ("web", "worker"):
                assert component(docs, "Deployment", name)["spec"]["replicas"] == expected
