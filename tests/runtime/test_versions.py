"""The version matrix (runtime/versions.py): each component's tested and oldest supported
version, and how a version found on a cluster is judged."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runtime.versions import FAIL, OK, VERSIONS, WARN, check, parse

SHARED = Path(__file__).resolve().parents[3] / "shared"


@pytest.mark.parametrize(
    ("component", "found", "level"),
    [
        ("kubernetes", "v1.36.2", OK),
        ("kubernetes", "v1.34.9-gke.1200", OK),  # Kueue 0.19.2 supports 1.34-1.36
        ("kubernetes", "v1.33.5", FAIL),
        ("kubernetes", "v1.37.0", WARN),
        ("kueue", "v0.19.2", OK),
        ("kueue", "v0.16.0", OK),
        ("kueue", "v0.15.3", FAIL),  # no v1beta2 storage version
        ("kueue", "v0.20.0", WARN),
        ("kuberay", "v1.6.2", OK),
        ("kuberay", "1.7.0", WARN),
        ("kuberay", "v1.7.1-rc.0", WARN),
        ("kuberay", "v1.5.1", FAIL),
        ("kserve", "v0.20.0", OK),
        ("kserve", "v0.19.0", WARN),  # no known lower bound: older than tested is a warning
        ("gateway-api", "v1.6.1", WARN),  # never run live
        ("gateway-api", "v0.8.0", FAIL),
        ("karpenter", "1.14.1", OK),
        ("karpenter", "0.37.0", FAIL),
    ],
)
def test_each_found_version_is_judged(component, found, level):
    assert check(component, found)[0] == level


def test_an_unreadable_version_is_a_warning_that_names_the_tested_one():
    assert check("kueue", None) == (WARN, "Kueue version unknown (tested on 0.19.2).")
    assert check("kuberay", "latest") == (WARN, "KubeRay version unknown (tested on 1.6.2).")


def test_kuberay_1_7_says_why():
    level, message = check("kuberay", "v1.7.0")
    assert level == WARN
    assert message == (
        "KubeRay 1.7.0: by its code KubeRay 1.7 copies `suspend` to the RayCluster only at creation; "
        "the portal is tested on 1.6.2."
    )


def test_messages_give_the_numbers():
    assert check("kubernetes", "v1.33.5")[1] == (
        "Kubernetes 1.33.5 is older than 1.34.0, the oldest the portal supports (tested on 1.36.2)."
    )
    assert check("kueue", "v0.19.2")[1] == "Kueue 0.19.2 (tested on 0.19.2)."


def test_parse_reads_the_forms_clusters_report():
    assert parse("v1.36.2") == (1, 36, 2)
    assert parse("1.36") == (1, 36, 0)
    assert parse("v0.19.2+abcdef") == (0, 19, 2)
    assert parse("") is None and parse(None) is None and parse("main") is None


def test_every_entry_has_a_tested_and_a_minimum_field():
    for name, component in VERSIONS.items():
        assert component.tested is None or parse(component.tested), name
        assert component.minimum is None or parse(component.minimum), name
        if component.tested and component.minimum:
            assert parse(component.minimum) <= parse(component.tested), name


@pytest.mark.skipif(not (SHARED / "k8s" / "README.md").exists(), reason="../shared/k8s is not here")
def test_the_tested_versions_are_the_test_control_planes():
    """The binaries of ../shared/k8s (README table) are the versions the matrix calls tested."""
    table = (SHARED / "k8s" / "README.md").read_text()
    rows = re.findall(r"^\| `([\w-]+)`.*?@ v([\d.]+)", table, flags=re.M)
    built = {name: version for name, version in rows}
    assert built["etcd"] == VERSIONS["etcd"].tested
    assert built["kueue"] == VERSIONS["kueue"].tested
    assert built["kuberay-operator"] == VERSIONS["kuberay"].tested
    assert built["karpenter-kwok"] == VERSIONS["karpenter"].tested
    assert built["kserve-controller"] == VERSIONS["kserve"].tested
    assert built["kwok"] == VERSIONS["kwok"].tested
    assert f"k8s.io/kubernetes @ v{VERSIONS['kubernetes'].tested}" in table


@pytest.mark.skipif(not (SHARED / "schemas" / "crds").exists(), reason="../shared/schemas is not here")
def test_gateway_api_is_untested_because_its_crds_name_no_release():
    bundles = {
        line.split(":", 1)[1].strip()
        for path in (SHARED / "schemas" / "crds").glob("gateway.networking.k8s.io_*.yaml")
        for line in path.read_text().splitlines()[:12]
        if "gateway.networking.k8s.io/bundle-version" in line
    }
    assert bundles == {"v0.0.0-dev"}
    assert VERSIONS["gateway-api"].tested is None and VERSIONS["kuadrant"].tested is None
