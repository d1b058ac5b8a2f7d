"""The CRDs' own CEL rules (`x-kubernetes-validations`) against what the portal renders.

A real API server evaluates these rules after structural validation; kmock does not, so
tests/support/crd.py evaluates them with cel-python. These tests show the check runs (rules
evaluated per kind, skipped rules listed with their reasons in the warnings summary), that
it bites where structure alone is silent, and that the portal refuses a flavor's tolerations
itself before the cluster would.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import replace

import pytest
from django.core.exceptions import ValidationError

from quotas.models import GpuFlavor
from quotas.specs import flavor_spec
from runtime import manifests
from runtime.spec import Toleration
from tests.runtime import test_karpenter, test_kserve, test_manifests
from tests.support.crd import SchemaError, assert_valid, cel_check, served_schema, unknown_fields, validate

# Every object the portal renders for a cluster, as the renderer tests build them (so a
# renderer change is checked here the moment it lands there).
RENDERED = {
    **{f"manifests/{name}": build for name, build in test_manifests.SCHEMA_CASES.items()},
    **{f"kserve/{name}": build for name, build in test_kserve.SCHEMA_CASES.items()},
    **{f"karpenter/{name}": build for name, build in test_karpenter.SCHEMA_CASES.items()},
}


class CelRuleSkipped(UserWarning):
    """A CRD rule the CEL check could not evaluate; the API server would."""


def _report_by_kind() -> tuple[dict[str, set], dict[str, set]]:
    evaluated: dict[str, set] = defaultdict(set)
    skipped: dict[str, set] = defaultdict(set)
    for build in RENDERED.values():
        obj = build()
        report = assert_valid(obj)
        evaluated[obj["kind"]] |= {(rule.path, rule.rule) for rule in report.evaluated}
        skipped[obj["kind"]] |= {(rule.path, rule.rule, reason) for rule, reason in report.skipped}
    return evaluated, skipped


def _flavor(*tolerations: Toleration) -> dict:
    return manifests.render_resource_flavor(replace(test_manifests.H100, tolerations=tolerations))


class TestRenderedObjectsObeyTheCelRules:
    @pytest.mark.parametrize("case", sorted(RENDERED))
    def test_rendered_object_passes_every_rule_it_reaches(self, case: str) -> None:
        report = assert_valid(RENDERED[case]())  # raises SchemaError listing failed rules
        assert not report.failures

    def test_rules_are_evaluated_for_each_kind_and_skips_are_listed(self) -> None:
        evaluated, skipped = _report_by_kind()
        # The five toleration rules and the topology rule of the ResourceFlavor; the four
        # spec / preemption / fungibility / resourceGroups rules of the ClusterQueue.
        assert len(evaluated["ResourceFlavor"]) >= 6
        assert len(evaluated["ClusterQueue"]) >= 4
        # A LocalQueue's only rule is a transition rule (clusterQueue is immutable).
        assert evaluated["LocalQueue"] == set()
        assert {(path, reason.split(":")[0]) for path, _, reason in skipped["LocalQueue"]} == {
            ("spec.clusterQueue", "transition rule (oldSelf)")
        }
        # Every skip says why; the warning puts the list in the test output.
        lines = [
            f"{kind} {path}: {rule!r} — {reason}"
            for kind, rules in sorted(skipped.items())
            for path, rule, reason in sorted(rules)
        ]
        assert all(reason for rules in skipped.values() for _, _, reason in rules)
        counts = ", ".join(
            f"{kind} {len(evaluated[kind])} evaluated / {len(skipped[kind])} skipped"
            for kind in sorted(set(evaluated) | set(skipped))
        )
        warnings.warn(CelRuleSkipped(f"{counts}; skipped:\n  " + "\n  ".join(lines)), stacklevel=1)

    def test_rayservice_rules_run_when_the_field_they_guard_is_present(self) -> None:
        # The portal sets none of the RayService's rule-bearing fields (spec.managedBy…), so
        # rendering alone reaches no rule: show the check does evaluate them when it can.
        rayservice = test_manifests.SCHEMA_CASES["rayservice_small"]()
        rayservice["spec"]["managedBy"] = "someone-else"
        with pytest.raises(SchemaError, match="managedBy field value must be either"):
            assert_valid(rayservice)
        rayservice["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        report = assert_valid(rayservice)
        assert [rule.path for rule in report.evaluated] == ["spec.managedBy"]
        assert [reason.split(":")[0] for _, reason in report.skipped] == ["transition rule (oldSelf)"]

    def test_cohort_rules_run_when_it_has_resource_groups(self) -> None:
        cohort = manifests.render_cohort("shared-gpus")
        cohort["spec"]["resourceGroups"] = [
            {
                "coveredResources": ["nvidia.com/gpu", "cpu"],
                "flavors": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}],
            }
        ]
        with pytest.raises(SchemaError, match="CEL rules"):
            assert_valid(cohort)


class TestCelCheckBitesOnResourceFlavorTolerations:
    def test_the_portals_rendered_flavors_pass(self) -> None:
        for flavor in (test_manifests.H100, test_manifests.L4):
            report = assert_valid(manifests.render_resource_flavor(flavor))
            assert report.evaluated and not report.failures

    def test_an_empty_effect_fails_only_the_cel_rule(self) -> None:
        obj = _flavor(Toleration(key="nvidia.com/gpu", operator="Exists", effect=""))
        schema = served_schema(obj["apiVersion"], obj["kind"])
        validate(obj, schema)  # structurally fine: effect is just a string
        assert unknown_fields(obj, schema) == []
        assert cel_check(obj, schema).failures == [
            "spec.tolerations: supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'"
        ]
        with pytest.raises(SchemaError, match="supported taint effect values"):
            assert_valid(obj)

    def test_an_empty_key_with_operator_equal_fails(self) -> None:
        obj = _flavor(Toleration(key="", operator="Equal", value="x"))
        assert "key" not in obj["spec"]["tolerations"][0]  # the renderer omits an empty key
        with pytest.raises(SchemaError, match="operator must be Exists when 'key' is empty"):
            assert_valid(obj)

    def test_an_empty_key_with_operator_exists_passes(self) -> None:
        report = assert_valid(_flavor(Toleration(key="", operator="Exists")))
        assert len(report.evaluated) >= 5


# (stored toleration, portal accepts, the CRD accepts the ResourceFlavor rendered from it).
# The portal may be stricter than the CRD, never looser.
TOLERATION_CASES = [
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True, True),
    ({"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoExecute"}, True, True),
    ({"key": "dedicated", "value": "llm"}, True, True),  # operator Equal, effect NoSchedule
    ({"operator": "Exists"}, True, True),  # empty key: every taint
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": ""}, False, False),
    ({"key": "nvidia.com/gpu", "effect": "Sometimes"}, False, False),
    ({"key": "", "operator": "Equal", "value": "x"}, False, False),
    ({"value": "x"}, False, False),  # operator defaults to Equal
    ({"key": "gpu-count", "operator": "Gt", "value": "4"}, False, False),
    # The renderer drops the value, so the CRD would accept; the portal says what it ignores.
    ({"key": "nvidia.com/gpu", "operator": "Exists", "value": "yes"}, False, True),
]


@pytest.mark.parametrize(("toleration", "portal_accepts", "crd_accepts"), TOLERATION_CASES)
def test_the_portal_refuses_every_toleration_the_crd_would(
    toleration: dict, portal_accepts: bool, crd_accepts: bool
) -> None:
    flavor = GpuFlavor(name="h100", gpu_model="H100", accelerator_type="H100", gpu_memory_gib=80, gpus_per_node=8)
    flavor.tolerations = [toleration]
    try:
        flavor.clean()
        accepted = True
    except ValidationError as error:
        assert "tolerations" in error.message_dict
        accepted = False
    obj = manifests.render_resource_flavor(flavor_spec(flavor))
    schema = served_schema(obj["apiVersion"], obj["kind"])
    assert (accepted, not cel_check(obj, schema).failures) == (portal_accepts, crd_accepts)
