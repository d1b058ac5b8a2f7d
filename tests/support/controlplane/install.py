"""What goes into a fresh control plane before the controllers start: the CRDs the releases ship
(created, never applied: Kueue's Workload CRD is 1.4 MB, beyond an apply's annotation), Kueue's
conversion webhooks and webhook configurations pointed at 127.0.0.1 with the run's CA, and the
visibility API through an ExternalName Service (../shared/k8s/README.md, "Kueue").
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from runtime.manifests.kserve import PORTAL_ANNOTATIONS
from tests.support.controlplane.binaries import K8S_DIR
from tests.support.controlplane.procs import wait_until

if TYPE_CHECKING:
    from tests.support.controlplane.plane import ControlPlane

MANIFESTS = K8S_DIR / "manifests"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# Kueue's CRDs served through its conversion webhook (kueue/crds/patches/webhook_in_*.yaml).
KUEUE_CONVERTED = {"clusterqueues", "cohorts", "localqueues", "multikueueclusters", "workloads"}
KUEUE_WEBHOOKS = ("kueue-mutating-webhook-configuration", "kueue-validating-webhook-configuration")


def _docs(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _ca_bundle(plane: ControlPlane) -> str:
    return base64.b64encode(plane.ca.read_bytes()).decode()


def _create_crds(plane: ControlPlane, files: list[Path], patch=None) -> list[str]:
    names = []
    for path in files:
        for crd in _docs(path):
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            if patch:
                patch(crd)
            plane.request("POST", CRDS, crd)
            names.append(crd["metadata"]["name"])
    return names


def _established(plane: ControlPlane, names: list[str]) -> None:
    def all_established():
        for name in names:
            conditions = plane.request("GET", f"{CRDS}/{name}").get("status", {}).get("conditions", [])
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_until(all_established, timeout=60, what="CRDs Established")

    def all_served():
        # Established is not enough: a LIST right after it may answer 429 "storage is
        # (re)initializing" while the API server builds the new resource's storage.
        for name in names:
            crd = plane.request("GET", f"{CRDS}/{name}")
            version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
            plane.request("GET", f"/apis/{crd['spec']['group']}/{version}/{crd['spec']['names']['plural']}?limit=1")
        return True

    wait_until(all_served, timeout=60, what="CRDs served")


def install_crds(plane: ControlPlane, *, kserve: bool) -> None:
    ca = _ca_bundle(plane)
    port = plane.ports["webhook"]

    def kueue_conversion(crd: dict) -> None:
        if crd["spec"]["names"]["plural"] in KUEUE_CONVERTED:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": f"https://127.0.0.1:{port}/convert", "caBundle": ca},
                    "conversionReviewVersions": ["v1"],
                },
            }

    names = _create_crds(plane, sorted((MANIFESTS / "kuberay" / "crds").glob("*.yaml")))
    names += _create_crds(plane, sorted((MANIFESTS / "kueue" / "crds").glob("kueue.x-k8s.io_*.yaml")), kueue_conversion)
    if kserve:
        names += _create_crds(
            plane, sorted(p for p in (MANIFESTS / "kserve" / "crds").rglob("serving.kserve.io_*.yaml"))
        )
    _established(plane, names)


def _job_webhook_names() -> set[str]:
    """The webhooks the shipped kustomization gives the namespaceSelector (its `replacements`
    targets), plus the source `vpod.kb.io`."""
    text = (MANIFESTS / "kueue" / "webhook" / "kustomization.yaml").read_text()
    return set(re.findall(r"webhooks\.\[name=([a-z0-9.-]+)\]", text)) | {"vpod.kb.io"}


def install_kueue_webhooks(plane: ControlPlane) -> None:
    ca = _ca_bundle(plane)
    port = plane.ports["webhook"]
    selector = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}
        ]
    }
    jobs = _job_webhook_names()
    for config in _docs(MANIFESTS / "kueue" / "webhook" / "manifests.yaml"):
        kind = config["kind"]
        config["metadata"]["name"] = "kueue-" + config["metadata"]["name"]
        for hook in config.get("webhooks", []):
            path = hook["clientConfig"]["service"].get("path", "/")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
            if hook["name"] in jobs:
                hook["namespaceSelector"] = selector
        plural = "mutatingwebhookconfigurations" if kind.startswith("Mutating") else "validatingwebhookconfigurations"
        plane.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", config)


def install_visibility(plane: ControlPlane) -> None:
    port = plane.ports["visibility"]
    plane.request(
        "POST",
        "/api/v1/namespaces/kueue-system/services",
        {
            "metadata": {"name": "visibility-server"},
            "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"name": "https", "port": port}]},
        },
    )
    for doc in _docs(MANIFESTS / "kueue" / "visibility" / "apiservice_v1beta2.yaml"):
        doc["spec"]["service"]["port"] = port
        plane.request("POST", "/apis/apiregistration.k8s.io/v1/apiservices", doc)


def _kserve_ca_bundle(plane: ControlPlane) -> str:
    """The CA bundle for KServe's webhooks: the CA that signed the serving certificate at KServe's
    fixed path. Another live run may have written it (the path outlives a run while others are
    alive: plane._undo), so its CA is looked up among the runs' PKIs; a certificate no live run's
    CA signed is replaced by this run's."""
    import shutil

    from tests.support.controlplane.plane import KSERVE_FIXED_CERTS, RUNS

    served = x509.load_pem_x509_certificate((KSERVE_FIXED_CERTS / "tls.crt").read_bytes())
    for ca_path in [plane.ca, *sorted(RUNS.glob("*/pki/ca.crt"))]:
        try:
            served.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_path.read_bytes()))
        except (ValueError, TypeError, InvalidSignature):
            continue
        return base64.b64encode(ca_path.read_bytes()).decode()
    shutil.copy(plane.dir / "pki" / "webhook.crt", KSERVE_FIXED_CERTS / "tls.crt")
    shutil.copy(plane.dir / "pki" / "webhook.key", KSERVE_FIXED_CERTS / "tls.key")
    return _ca_bundle(plane)


def install_kserve(plane: ControlPlane) -> None:
    plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": "kserve"}})
    for doc in _docs(MANIFESTS / "kserve" / "configmap" / "inferenceservice.yaml"):
        if doc.get("kind") == "ConfigMap":
            doc["metadata"]["namespace"] = "kserve"
            doc.setdefault("data", {})["deploy"] = '{"defaultDeploymentMode": "Standard"}'
            # As docs/install.md has the install do: the portal's own annotations stay off the
            # predictor's pod template (runtime.manifests.kserve.PORTAL_ANNOTATIONS).
            isvc_config = json.loads(doc["data"]["inferenceService"])
            isvc_config["serviceAnnotationDisallowedList"] = list(PORTAL_ANNOTATIONS)
            doc["data"]["inferenceService"] = json.dumps(isvc_config)
            plane.request("POST", "/api/v1/namespaces/kserve/configmaps", doc)
    ca = _kserve_ca_bundle(plane)
    port = plane.ports["kserve_wh"]
    for config in _docs(MANIFESTS / "kserve" / "webhook" / "manifests.yaml"):
        kind = config["kind"]
        if not kind.endswith("WebhookConfiguration"):
            continue
        for hook in config.get("webhooks", []):
            path = (hook["clientConfig"].get("service") or {}).get("path", "/")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
        plural = "mutatingwebhookconfigurations" if kind.startswith("Mutating") else "validatingwebhookconfigurations"
        plane.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", config)
