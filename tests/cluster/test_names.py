"""The portal refuses exactly the RayService names KubeRay 1.6.2 refuses after the API server took them.

The CRD's schema does not constrain `metadata.name` beyond the API server's DNS-1123 subdomain,
so `7b-chat-1` is created; KubeRay then validates the name (ray-project/kuberay v1.6.2,
ray-operator/controllers/ray/utils/validation.go, `ValidateRayServiceMetadata`: a DNS-1035 label
of at most 47 characters) and marks the RayService `Ready=False` with reason `ValidationFailed`
for good. The request form must therefore refuse those names (deployments/validation.py, with
the rule in runtime/manifests/common.py), and accept every name KubeRay takes.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from runtime import k8s
from runtime.manifests.common import DNS1035_LABEL
from runtime.manifests.rayservice import RAYSERVICE_NAME_MAX
from tests.cluster.chain import condition

GOLDEN = Path(__file__).resolve().parents[1] / "runtime" / "golden" / "rayservice_small.yaml"
NAMESPACE = "names-contract"
RAYSERVICES = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayservices"
NAMES = ["7b-chat-1", "b7-chat-1", "a" * 47, "a" * 48, "x-1"]


def portal_accepts(name: str) -> bool:
    return len(name) <= RAYSERVICE_NAME_MAX and bool(DNS1035_LABEL.fullmatch(name))


def test_the_portal_and_kuberay_agree_on_which_rayservice_names_are_valid(kube):
    kube.plane.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    golden = yaml.safe_load(GOLDEN.read_text())
    # No queue: Kueue leaves the RayService alone, and KubeRay's verdict is the only one.
    golden["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    for name in NAMES:
        obj = {**golden, "metadata": {**golden["metadata"], "name": name, "namespace": NAMESPACE}}
        kube.plane.request("POST", f"{RAYSERVICES}", obj)  # the API server takes every one of them

    def verdicts():
        found = {}
        for name in NAMES:
            ready = condition(kube.get(k8s.RAYSERVICE, name, NAMESPACE), "Ready")
            if ready.get("reason") == "ValidationFailed":
                found[name] = False
            else:
                # KubeRay reconciled it without refusing it: it created a RayCluster for it.
                clusters = kube.raw(f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters")["items"]
                if any(c["metadata"]["name"].startswith(f"{name}-") for c in clusters):
                    found[name] = True
        return found if len(found) == len(NAMES) else None

    seen = kube.wait(verdicts, timeout=60, what="KubeRay's verdict on every name")
    assert seen == {name: portal_accepts(name) for name in NAMES}
    assert seen["7b-chat-1"] is False and seen["b7-chat-1"] is True  # the case the issue found
