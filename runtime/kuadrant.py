"""What Kuadrant says about a policy it manages: accepted, and enforced on the data plane.

Kuadrant writes two conditions on every policy (Kuadrant/kuadrant-operator at ae698811,
internal/kuadrant/conditions.go and internal/controller/auth_policy_status_updater.go):

- `Accepted` (Gateway API's PolicyConditionAccepted): True, reason `Accepted`, once the policy is
  valid and its target exists; False with reason `TargetNotFound` while the targeted HTTPRoute
  is missing (auth_policies_validator.go, NewErrPolicyTargetNotFound), or another reason.
- `Enforced`: set only while Accepted is True (removed otherwise); True, reason `Enforced`, once
  the policy's rules are in the effective policy of a route the Gateway accepted and the
  AuthConfig Authorino serves for it is ready; False with reason `Unknown`, `Overridden`,
  `MissingDependency` (Kuadrant, Authorino or the gateway's extension missing) otherwise.

Each status write also sets `observedGeneration` to the policy's generation, so a status older
than the spec the portal applied says nothing about that spec. Pure: reads a dict.
"""

from __future__ import annotations

from typing import Any

ACCEPTED = "Accepted"
ENFORCED = "Enforced"


def _conditions(policy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in (policy.get("status") or {}).get("conditions") or []}


def _said(condition: dict[str, Any]) -> str:
    reason, message = condition.get("reason") or "no reason", condition.get("message") or ""
    return f"{condition.get('type')} is {condition.get('status')} ({reason}{': ' + message if message else ''})"


def enforcement(policy: dict[str, Any] | None) -> tuple[bool, str]:
    """(enforced, why in words) for a Kuadrant policy as read from the cluster. Only Accepted
    and Enforced both True, reported for the policy's current generation, count: anything else
    (no status yet, a status of an older spec, either condition False or absent) is not."""
    if policy is None:
        return False, "it does not exist"
    generation = (policy.get("metadata") or {}).get("generation")
    observed = (policy.get("status") or {}).get("observedGeneration")
    if generation is not None and observed != generation:
        return False, f"Kuadrant has not reported on its generation {generation} yet"
    conditions = _conditions(policy)
    for kind in (ACCEPTED, ENFORCED):
        condition = conditions.get(kind)
        if condition is None:
            return False, f"Kuadrant reports no {kind} condition yet"
        if condition.get("status") != "True":
            return False, _said(condition)
    return True, _said(conditions[ENFORCED])


def accepted(policy: dict[str, Any]) -> tuple[bool | None, str]:
    """(accepted, in words): None while Kuadrant has not said."""
    condition = _conditions(policy).get(ACCEPTED)
    if condition is None:
        return None, "Kuadrant reports no Accepted condition yet"
    return condition.get("status") == "True", _said(condition)
