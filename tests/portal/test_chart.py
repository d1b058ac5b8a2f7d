"""charts/llm-portal: the Helm chart that is the one source of the portal's cluster manifests.

With the real helm (3.22.0, from ../shared/k8s; tests.support.chart): scripts/check-chart, the
one implementation CI runs too, passes: `helm lint --strict` and `helm template` with the defaults
and with each charts/llm-portal/ci/*-values.yaml (every optional part on), every rendered object
valid against the real schemas (tests.support.chart_schemas: core kinds against the Kubernetes
OpenAPI of kubernetes-validate, strict, at the oldest supported and the tested Kubernetes;
HTTPRoute: ../shared/schemas/crds; ServiceMonitor: prometheus-operator's CRD, tests/support/crds);
values.schema.json refuses a bad
value at `helm template` (hence at install), the migrations are a hook run on every install and
upgrade, no secret value is ever rendered, and the rendered settings are ones the portal starts
with. Without ../shared these tests skip with the reason; with CI set they fail.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime import preemption
from runtime.k8s import permissions
from tests.portal.test_compose import settings_env_names
from tests.support import chart, chart_schemas

ROOT = Path(__file__).resolve().parents[2]
CHECK_CHART = ROOT / "scripts" / "check-chart"
SECRET_SETTINGS = {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "METRICS_TOKEN"}
# The defaults and each of the chart's ci/*-values.yaml (what scripts/check-chart checks).
CASES: dict[str, dict[str, Any] | None] = {
    "defaults": None,
    **{
        path.name.removesuffix("-values.yaml"): yaml.safe_load(path.read_text())
        for path in sorted(chart.CI_VALUES.glob("*-values.yaml"))
    },
}
ALL_WITH_INGRESS = CASES["all-on-ingress"]


@pytest.fixture(autouse=True)
def _helm(request: pytest.FixtureRequest) -> None:
    if request.function not in FILES_ONLY:
        chart.require_helm()


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        f"{doc['kind']}/{doc['metadata']['name']}": doc["spec"]["template"]["spec"]
        for doc in docs
        if doc["kind"] in ("Deployment", "Job")
    }


# ---------------------------------------------------------------------------------------------
# The chart itself
# ---------------------------------------------------------------------------------------------


def test_chart_and_image_versions_follow_the_project_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    meta = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    assert (meta["version"], meta["appVersion"], values["image"]["tag"]) == (version, version, version)


def test_the_ingress_case_is_the_all_on_case_with_an_ingress_instead_of_the_route() -> None:
    assert ALL_WITH_INGRESS == {**chart.ALL_ON, "httpRoute": {"enabled": False}, **chart.WITH_INGRESS}


def test_the_preemption_choices_are_the_ones_the_portal_accepts() -> None:
    """values.schema.json refuses at install what portal/settings.py would refuse at start
    (runtime/preemption.py: Kueue's CRD enums), and the chart's defaults are the portal's."""
    schema = json.loads((chart.CHART / "values.schema.json").read_text())["properties"]["kueue"]["properties"]
    values = yaml.safe_load((chart.CHART / "values.yaml").read_text())["kueue"]
    for field, (_, words) in preemption.SETTINGS.items():
        assert schema[field]["enum"] == list(words), field
    assert (values["reclaimWithinCohort"], values["withinClusterQueue"]) == ("Any", "LowerPriority")


FILES_ONLY = {
    test_chart_and_image_versions_follow_the_project_version,
    test_the_ingress_case_is_the_all_on_case_with_an_ingress_instead_of_the_route,
    test_the_preemption_choices_are_the_ones_the_portal_accepts,
}


def check_chart(*values_files: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HELM": str(chart.helm()), "PYTHON": sys.executable}
    return subprocess.run(
        [str(CHECK_CHART), *map(str, values_files)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_check_chart_lints_renders_and_validates_every_case() -> None:
    """scripts/check-chart (CI's chart check): lint --strict, template and schema validation of
    the defaults and each ci/*-values.yaml, every object valid at both Kubernetes versions."""
    result = check_chart()
    assert result.returncode == 0, result.stdout + result.stderr
    (summary,) = result.stdout.splitlines()
    objects = sum(len(chart.render(values)) for values in CASES.values())
    cases = re.match(r"check-chart: ok: (\d+) cases \(([^)]*)\):", summary)
    assert cases and (int(cases[1]), sorted(cases[2].split())) == (len(CASES), sorted(CASES)), summary
    assert f"{objects} objects checked" in summary, summary


def test_check_chart_fails_on_a_case_the_chart_refuses(tmp_path: Path) -> None:
    bad = tmp_path / "two-web-values.yaml"
    bad.write_text("web:\n  replicas: two\n")
    result = check_chart(bad)
    assert result.returncode == 1
    assert "check-chart: FAILED: helm lint --strict, case 'two-web'" in result.stderr
    assert "at '/web/replicas': got string, want integer" in result.stdout + result.stderr


def test_the_defaults_render_the_portal_and_nothing_optional() -> None:
    kinds = sorted(doc["kind"] for doc in chart.render())
    assert kinds == sorted(
        ["ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Service", "PodDisruptionBudget"]
        + ["Deployment"] * 3
        + ["Job"]
    )


def test_every_option_on_renders_each_optional_part() -> None:
    kinds = {doc["kind"] for doc in chart.render(chart.ALL_ON)}
    assert {"NetworkPolicy", "ServiceMonitor", "HTTPRoute", "Role", "RoleBinding"} <= kinds
    assert "Ingress" not in kinds
    assert {doc["kind"] for doc in chart.render(ALL_WITH_INGRESS)} - kinds == {"Ingress"}
    (egress,) = [
        p for p in of_kind(chart.render(chart.ALL_ON), "NetworkPolicy") if p["metadata"]["name"].endswith("egress")
    ]
    assert {"ipBlock": {"cidr": "10.0.0.1/32"}} in egress["spec"]["egress"][1]["to"]


def test_the_validator_refuses_a_broken_object() -> None:
    docs = chart.render(chart.ALL_ON)
    assert [chart_schemas.problems(doc) for doc in docs] == [[]] * len(docs)
    (monitor,) = of_kind(docs, "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = "half a minute"
    (problem,) = chart_schemas.problems(monitor)
    assert "spec.endpoints.0.interval: 'half a minute' does not match" in problem
    (web,) = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-web")]
    web["spec"]["template"]["spec"]["containers"][0]["readinessProb"] = {}
    assert chart_schemas.problems(web) == [
        f"Kubernetes {version}: Additional properties are not allowed ('readinessProb' was unexpected)"
        " at spec/template/spec/containers/0"
        for version in chart_schemas.KUBE_VERSIONS
    ]


# ---------------------------------------------------------------------------------------------
# values.schema.json: a bad value is refused at template (so at install and upgrade) time
# ---------------------------------------------------------------------------------------------

REFUSED = {
    # wrong type
    "replicas-a-string": ({"web": {"replicas": "two"}}, "/web/replicas"),
    "replicas-a-float": ({"worker": {"replicas": 1.5}}, "/worker/replicas"),
    "flag-a-string": ({"rbac": {"readiness": {"enabled": "yes"}}}, "/rbac/readiness/enabled"),
    "hosts-not-a-list": ({"portal": {"allowedHosts": "portal.example.com"}}, "/portal/allowedHosts"),
    # out of range
    "zero-replicas": ({"worker": {"replicas": 0}}, "/worker/replicas"),
    "no-allowed-host": ({"portal": {"allowedHosts": []}}, "/portal/allowedHosts"),
    "karpenter-small-root-volume": ({"karpenter": {"rootVolumeGiB": 10}}, "/karpenter/rootVolumeGiB"),
    # bad enum
    "log-level": ({"portal": {"logLevel": "LOUD"}}, "/portal/logLevel"),
    "queueing-strategy": ({"kueue": {"queueingStrategy": "FIFO"}}, "/kueue/queueingStrategy"),
    "reclaim-within-cohort": ({"kueue": {"reclaimWithinCohort": "Always"}}, "/kueue/reclaimWithinCohort"),
    "within-cluster-queue": ({"kueue": {"withinClusterQueue": "Any"}}, "/kueue/withinClusterQueue"),
    "backend": ({"runtime": {"backends": ["kuberay", "slurm"]}}, "/runtime/backends"),
    "oidc-sign-algo": ({"oidc": {"signAlgo": "none"}}, "/oidc/signAlgo"),
    "pull-policy": ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    # missing required
    "image-repository": ({"image": {"repository": None}}, "at '/image': missing property 'repository'"),
    "image-tag": ({"image": {"tag": None}}, "at '/image': missing property 'tag'"),
    "database-secret-key": (
        {"secrets": {"databaseUrl": {"key": None}}},
        "'/secrets/databaseUrl': missing property 'key'",
    ),
    "empty-image-tag": ({"image": {"tag": ""}}, "/image/tag"),
    # Secret-name references
    "secret-name-not-dns": (
        {"secrets": {"brokerUrl": {"secretName": "Portal_Secrets"}}},
        "/secrets/brokerUrl/secretName",
    ),
    "secret-key-with-slash": ({"secrets": {"secretKey": {"key": "a/b"}}}, "/secrets/secretKey/key"),
    "secret-in-config": ({"extraConfig": {"DATABASE_URL": "postgres://u:p@db/portal"}}, "propertyName 'DATABASE_URL'"),
    "own-setting-in-config": ({"extraConfig": {"LOG_LEVEL": "DEBUG"}}, "propertyName 'LOG_LEVEL'"),
    "extra-config-a-number": ({"extraConfig": {"SECURE_HSTS_SECONDS": 600}}, "/extraConfig/SECURE_HSTS_SECONDS"),
    # not a setting's name, or a typo'd key
    "extra-config-lowercase": ({"extraConfig": {"email_host": "smtp"}}, "propertyName 'email_host'"),
    "unknown-key": ({"web": {"replica": 3}}, "additional properties 'replica' not allowed"),
    "beat-replicas": ({"beat": {"replicas": 2}}, "'/beat': additional properties 'replicas'"),
    "latest-tag": ({"image": {"tag": "latest"}}, "/image/tag"),
    # what portal/settings.py would refuse at start
    "url-without-scheme": ({"gateway": {"publicUrl": "llm.example.com"}}, "/gateway/publicUrl"),
    "oidc-without-endpoints": ({"oidc": {"enabled": True, "clientId": "portal"}}, "/oidc/authorizationEndpoint"),
    "default-backend-not-offered": ({"runtime": {"backends": ["kserve"]}}, "/runtime/backends': no items match"),
    "node-role-without-ami": ({"karpenter": {"nodeRole": "KarpenterNodeRole"}}, "/karpenter/amiAlias"),
    # one way in for the portal itself: an Ingress or an HTTPRoute
    "ingress-and-route": ({**chart.WITH_INGRESS, "httpRoute": chart.ALL_ON["httpRoute"]}, "at '': 'not' failed"),
    "egress-without-api-server": (
        {"networkPolicy": {"enabled": True, "egress": {"enabled": True}}},
        "/networkPolicy/egress/apiServerCidrs",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_the_values_schema_refuses_a_bad_value(case: str) -> None:
    values, where = REFUSED[case]
    result = chart.template_result(values)
    assert result.returncode != 0, f"{case}: rendered"
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert where in result.stderr, result.stderr


def test_a_good_value_beside_the_defaults_is_accepted() -> None:
    # The other side of the refusals: the single-backend installs the schema allows.
    for backends in (["kuberay"], ["kserve"]):
        values = {"runtime": {"backends": backends, "defaultBackend": backends[0]}}
        assert chart.template_result(values).returncode == 0


# ---------------------------------------------------------------------------------------------
# Migrations: a hook on every install and upgrade
# ---------------------------------------------------------------------------------------------


def test_migrations_are_a_pre_install_and_pre_upgrade_hook_replaced_each_time() -> None:
    docs = chart.render(chart.ALL_ON)
    hooks = [doc for doc in docs if "helm.sh/hook" in doc["metadata"].get("annotations", {})]
    (job,) = of_kind(docs, "Job")
    assert hooks == [job]
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    # before-hook-creation: the last run's Job is replaced (a Job's template is immutable), so
    # no one deletes it by hand before an upgrade; hook-succeeded: a finished one goes.
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]


def test_the_hook_carries_the_same_settings_as_the_pods_config_map() -> None:
    """The hook runs before the release's ConfigMap exists: its settings are inline, the same."""
    docs = chart.render(chart.ALL_ON)
    (config,) = of_kind(docs, "ConfigMap")
    (job,) = of_kind(docs, "Job")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert "envFrom" not in container
    inline = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert inline == config["data"]
    (web,) = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-web")]
    secret_env = [
        e for e in web["spec"]["template"]["spec"]["containers"][0]["env"] if "secretKeyRef" in e.get("valueFrom", {})
    ]
    assert [e for e in container["env"] if "valueFrom" in e] == secret_env


# ---------------------------------------------------------------------------------------------
# Secrets: by reference only
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_no_secret_value_is_rendered(case: str) -> None:
    docs = chart.render(CASES[case])
    assert not of_kind(docs, "Secret")
    (config,) = of_kind(docs, "ConfigMap")
    assert not set(config["data"]) & (SECRET_SETTINGS | {"OIDC_RP_CLIENT_SECRET"})
    for name, pod in pods(docs).items():
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            for entry in container.get("env", []):
                if entry["name"] in SECRET_SETTINGS | {"OIDC_RP_CLIENT_SECRET"}:
                    assert set(entry) == {"name", "valueFrom"}, (name, entry)
                    assert set(entry["valueFrom"]) == {"secretKeyRef"}, (name, entry)


def test_the_secret_settings_come_from_the_named_secret_keys() -> None:
    values = {
        "secrets": {"databaseUrl": {"secretName": "portal-db-app", "key": "uri"}},
        "oidc": {**chart.ALL_ON["oidc"], "clientSecret": {"secretName": "idp-client", "key": "secret"}},
    }
    docs = chart.render(values)
    for name, pod in pods(docs).items():
        for container in pod["containers"]:
            refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
            assert refs["DATABASE_URL"] == {"name": "portal-db-app", "key": "uri"}, name
            assert refs["OIDC_RP_CLIENT_SECRET"] == {"name": "idp-client", "key": "secret"}, name
            assert refs["SECRET_KEY"] == {"name": "llm-portal-secrets", "key": "SECRET_KEY"}, name
            assert refs["METRICS_TOKEN"] == {"name": "llm-portal-secrets", "key": "METRICS_TOKEN", "optional": True}


# ---------------------------------------------------------------------------------------------
# The settings it renders are ones the portal starts with
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_the_config_map_sets_only_settings_the_portal_reads(case: str) -> None:
    (config,) = of_kind(chart.render(CASES[case]), "ConfigMap")
    assert set(config["data"]) <= settings_env_names(), set(config["data"]) - settings_env_names()


def pod_environment(values: dict[str, Any] | None) -> dict[str, str]:
    """What a portal container's environment holds: the rendered ConfigMap, and a value for each
    Secret key it references (placeholders: nothing here connects to them)."""
    (config,) = of_kind(chart.render(values), "ConfigMap")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        **config["data"],
        "SECRET_KEY": secrets.token_urlsafe(50),
        "DATABASE_URL": "postgres://portal:pw@db.example.internal:5432/portal",
        "CELERY_BROKER_URL": "redis://:pw@redis.example.internal:6379/0",
        "CACHE_URL": "redis://:pw@redis.example.internal:6379/1",
    }
    if "OIDC_RP_CLIENT_ID" in env:
        env["OIDC_RP_CLIENT_SECRET"] = secrets.token_urlsafe(32)
    return env


@pytest.mark.parametrize("case", ["defaults", "all-on"])
def test_the_portal_starts_with_the_rendered_settings(case: str) -> None:
    """Django loads portal/settings.py with exactly the rendered environment (the ConfigMap plus a
    value for each Secret reference): no setting is refused, and each lands as rendered."""
    env = pod_environment(CASES[case])
    probe = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.ALLOWED_HOSTS, s.RUNTIME_BACKENDS, s.KUEUE_CPU_NODE_LABELS, s.OIDC_ENABLED, s.DEBUG, "
        "s.AXES_COOLOFF_TIME.total_seconds(), s.KARPENTER_ROOT_VOLUME_GIB, s.SECURE_HSTS_SECONDS]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    hosts, backends, cpu_labels, oidc, debug, cooloff, volume, hsts = yaml.safe_load(result.stdout.splitlines()[-1])
    assert hosts == ["localhost", "portal.example.com"] and backends == ["kuberay", "kserve"] and debug is False
    if case == "all-on":
        assert (cpu_labels, oidc) == (chart.ALL_ON["kueue"]["cpuNodeLabels"], True)
        assert (cooloff, volume, hsts) == (100000, 1000000, 63072000)
    else:
        assert (cpu_labels, oidc, cooloff, volume, hsts) == ({}, False, 300, 200, 31536000)


@pytest.mark.parametrize(
    "values, expected",
    [
        (None, ["Any", "LowerPriority"]),
        (
            {"kueue": {"reclaimWithinCohort": "Never", "withinClusterQueue": "LowerOrNewerEqualPriority"}},
            ["Never", "LowerOrNewerEqualPriority"],
        ),
    ],
)
def test_the_preemption_values_reach_every_clusterqueue(values: dict[str, Any] | None, expected: list[str]) -> None:
    """kueue.reclaimWithinCohort / withinClusterQueue become the platform's preemption (the
    PlatformSpec every tenant ClusterQueue is rendered from)."""
    probe = (
        "import django; django.setup(); from runtime.platform import platform_spec; p = platform_spec(); "
        "print(p.reclaim_within_cohort, p.within_cluster_queue)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=pod_environment(values),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-2:] == expected


def test_prometheus_scrapes_a_web_pod_by_its_ip(client, settings) -> None:
    """With the ServiceMonitor on, Prometheus asks http://<pod IP>:8000/metrics: the web pods add
    their own IP to ALLOWED_HOSTS (the kubelet expands $(POD_IP)), and /metrics, like the probes,
    is exempt from the https redirect (the real SECURE_REDIRECT_EXEMPT), so the scrape is a 200."""
    (monitor,) = of_kind(chart.render(chart.ALL_ON), "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["scheme"], endpoint["path"], endpoint["port"]) == ("http", "/metrics", "http")
    assert endpoint["authorization"]["credentials"] == {"name": "llm-portal-secrets", "key": "METRICS_TOKEN"}
    (web,) = [d for d in of_kind(chart.render(chart.ALL_ON), "Deployment") if d["metadata"]["name"].endswith("-web")]
    env = web["spec"]["template"]["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert names.index("POD_IP") < names.index("ALLOWED_HOSTS")  # defined first, or not expanded
    (hosts,) = [e["value"] for e in env if e["name"] == "ALLOWED_HOSTS"]
    settings.ALLOWED_HOSTS = hosts.replace("$(POD_IP)", "10.244.1.7").split(",")
    settings.SECURE_SSL_REDIRECT = True  # HTTPS=true, the chart's default
    settings.METRICS_TOKEN = "scrape-token"
    response = client.get("/metrics", HTTP_HOST="10.244.1.7:8000", HTTP_AUTHORIZATION="Bearer scrape-token")
    assert response.status_code == 200
    assert b"# TYPE" in response.content


class _RecordingPlane:
    """Stands in for the control plane's admin client: records what grant() sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    def request(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((method, path, body))
        return body


def test_the_real_plane_grants_the_portal_what_the_chart_renders() -> None:
    """tests.support.controlplane.identity binds the `llm-portal` ServiceAccount (the one the chart
    renders, in the release namespace) to the chart's ClusterRole; the readiness test adds the
    chart's optional grant, Kueue's Role in Kueue's namespace."""
    from tests.support.controlplane.identity import PORTAL_NAMESPACE, grant

    (account,) = of_kind(chart.render(), "ServiceAccount")
    assert (PORTAL_NAMESPACE, account["metadata"]["name"]) == (chart.NAMESPACE, "llm-portal")
    plane = _RecordingPlane()
    paths = grant(plane, chart.rbac_objects())
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    assert [(m, p) for m, p, _ in plane.sent] == [
        ("POST", f"{rbac}/clusterroles"),
        ("POST", f"{rbac}/clusterrolebindings"),
    ]
    assert chart.rules_of(plane.sent[0][2]) == set(permissions.PORTAL)
    assert plane.sent[1][2]["subjects"] == [{"kind": "ServiceAccount", "name": "llm-portal", "namespace": "llm-portal"}]
    assert paths == [f"{rbac}/clusterroles/llm-portal", f"{rbac}/clusterrolebindings/llm-portal"]
    plane = _RecordingPlane()
    grant(plane, chart.readiness_rbac())
    assert ("POST", f"{rbac}/namespaces/kueue-system/roles") in [(m, p) for m, p, _ in plane.sent]


def test_django_deploy_checks_pass_with_the_chart_defaults() -> None:
    """`manage.py check --deploy` (Django's security checks and the portal's own) is clean, not
    even a warning, with the settings the chart's defaults render."""
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=pod_environment(None),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "System check identified no issues" in result.stdout
