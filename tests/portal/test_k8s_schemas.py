"""The portal's own Kubernetes manifests validate against the Kubernetes API schemas
(kubernetes-validate, strict: unknown fields fail), built per overlay with kustomize."""

import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
KUBE_VERSION = "1.32.0"


def built(overlay: str) -> list[dict]:
    kubectl = shutil.which("kubectl") or shutil.which("kustomize")
    if kubectl is None:
        pytest.skip("neither kubectl nor kustomize is installed")
    cmd = (
        [kubectl, "kustomize", str(K8S / "overlays" / overlay)]
        if kubectl.endswith("kubectl")
        else [kubectl, "build", str(K8S / "overlays" / overlay)]
    )
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.mark.parametrize("overlay", ["dev", "prod"])
def test_every_built_object_is_valid_for_kubernetes(overlay):
    docs = built(overlay)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ClusterRole", "ClusterRoleBinding", "Job", "PodDisruptionBudget"} <= kinds
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_the_validator_rejects_a_broken_object():
    broken = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {"replicas": "two", "selector": {}, "template": {"spec": {"containers": []}}},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)
