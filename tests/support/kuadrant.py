"""A simulated Kuadrant for tests: it writes an AuthPolicy's status as kuadrant-operator does.

Kuadrant/kuadrant-operator at ae698811, internal/controller/auth_policy_status_updater.go:
`Accepted` always (reason `Accepted`, or the error's reason, e.g. `TargetNotFound`); `Enforced`
only while Accepted is True (removed otherwise), reason `Enforced` or e.g. `MissingDependency`;
`observedGeneration` set to the policy's generation on every write (internal/kuadrant/conditions.go
for the messages). Writes go straight into the test server's store, as tests.support.operators'.
"""

from __future__ import annotations

from runtime import k8s
from tests.support.k8s import K8sApiServer
from tests.support.operators import _require, condition

ACCEPTED_REASONS = {True: "Accepted", False: "TargetNotFound"}
ENFORCED_REASONS = {True: "Enforced", False: "MissingDependency"}


def policy_status(
    server: K8sApiServer,
    ns: str,
    name: str,
    *,
    accepted: bool = True,
    enforced: bool | None = True,
    kind: k8s.Kind = k8s.AUTHPOLICY,
    generation: int | None = None,
) -> dict:
    """Report the policy Accepted / Enforced (None: no Enforced condition, as while Kuadrant has
    not finished) for `generation` (default: the policy's current one)."""
    obj = _require(server, kind, ns, name)
    conditions = [
        condition(
            "Accepted", accepted, ACCEPTED_REASONS[accepted], f"{kind.kind} has been accepted" if accepted else ""
        )
    ]
    if accepted and enforced is not None:
        said = f"{kind.kind} has been successfully enforced" if enforced else "Authorino is not ready"
        conditions.append(condition("Enforced", enforced, ENFORCED_REASONS[enforced], said))
    observed = obj["metadata"].get("generation", 1) if generation is None else generation
    status = {"conditions": conditions, "observedGeneration": observed}
    return server.patch_object(kind, name, ns, {"status": status}, status_only=True)
