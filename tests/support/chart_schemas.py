"""Every object the chart renders, validated against the schemas the API server would use.

Core kinds: the Kubernetes OpenAPI of kubernetes-validate, strict (unknown fields are errors), at
the oldest Kubernetes the chart admits (Chart.yaml kubeVersion) and the tested one. Custom kinds:
their CRD's served schema, unknown fields and CEL rules (tests.support.crd): HTTPRoute from
../shared/schemas/crds, ServiceMonitor from prometheus-operator's CRD in tests/support/crds.

scripts/check-chart (CI) runs it on `helm template`'s output:

    python -m tests.support.chart_schemas RENDERED.yaml...

and prints one line per invalid object, then how many objects it checked; exit status 1 when one
is invalid. tests/portal/test_chart.py runs that script, and uses `problems` for its own checks.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from tests.support import crd
from tests.support.shared import PROJECT_ROOT

# The oldest Kubernetes the chart admits (Chart.yaml kubeVersion) and the tested one.
KUBE_VERSIONS = ("1.34.0", "1.36.0")
SERVICE_MONITOR_CRD = PROJECT_ROOT / "tests" / "support" / "crds" / "monitoring.coreos.com_servicemonitors.yaml"
CRD_FILES = {"ServiceMonitor": SERVICE_MONITOR_CRD}  # kinds whose CRD is not in ../shared/schemas/crds


def problems(doc: dict[str, Any], kube_versions: tuple[str, ...] = KUBE_VERSIONS) -> list[str]:
    """Why the API server would refuse (or prune) `doc`; empty when it is valid. A kind the
    Kubernetes OpenAPI does not have is a custom one: its CRD's schema decides."""
    found = []
    for version in kube_versions:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            try:
                crd.assert_valid(doc, CRD_FILES.get(doc["kind"]))
            except crd.SchemaError as error:
                return [str(error)]
            return []
        except kubernetes_validate.ValidationError as error:
            where = "/".join(map(str, error.absolute_path)) or "(the object)"
            found.append(f"Kubernetes {version}: {error.message} at {where}")
    return found


def main(paths: list[str]) -> int:
    checked, failed = 0, 0
    for path in paths:
        for doc in yaml.safe_load_all(Path(path).read_text()):
            if not doc:
                continue
            checked += 1
            for problem in problems(doc):
                failed += 1
                print(f"{Path(path).name}: {doc['kind']}/{doc['metadata']['name']}: {problem}")
    print(f"{checked} objects checked, {failed} problems")
    return 1 if failed or not checked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
