"""Preemption of every tenant ClusterQueue as platform settings (issue 35; runtime/preemption.py):
each value renders, every pair is a ClusterQueue Kueue's CRD accepts (schema and CEL, against
../shared/schemas/crds/kueue.x-k8s.io_clusterqueues.yaml), the values offered are exactly the CRD's,
and each comes with the words the Cluster page shows."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from runtime.manifests.kueue import KUEUE_API_VERSION, render_cluster_queue
from runtime.preemption import RECLAIM_WITHIN_COHORT, SETTINGS, WITHIN_CLUSTER_QUEUE, preemption_settings
from runtime.spec import PlatformSpec
from tests.runtime.test_manifests import tenant_queue
from tests.support.crd import SchemaError, assert_valid, served_schema

PAIRS = list(itertools.product(RECLAIM_WITHIN_COHORT, WITHIN_CLUSTER_QUEUE))
PREEMPTION_RULE = "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"


def preemption_schema() -> dict:
    schema = served_schema(KUEUE_API_VERSION, "ClusterQueue")
    return schema["properties"]["spec"]["properties"]["preemption"]


class TestRender:
    def test_the_defaults_are_what_every_clusterqueue_had_before(self) -> None:
        queue = render_cluster_queue(tenant_queue(), PlatformSpec())
        assert queue["spec"]["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}

    @pytest.mark.parametrize("reclaim, within", PAIRS)
    @pytest.mark.parametrize("cohort", ["shared-gpus", ""])
    def test_every_pair_renders_and_kueue_accepts_it(self, reclaim: str, within: str, cohort: str) -> None:
        platform = PlatformSpec(reclaim_within_cohort=reclaim, within_cluster_queue=within)
        queue = render_cluster_queue(tenant_queue(cohort=cohort), platform)
        assert queue["spec"]["preemption"] == {"reclaimWithinCohort": reclaim, "withinClusterQueue": within}
        report = assert_valid(queue)
        assert PREEMPTION_RULE in {rule.message for rule in report.evaluated}  # the rule ran, not skipped

    def test_the_crd_rule_is_checked_on_what_kueue_defaults(self) -> None:
        """The one CEL rule between these fields needs borrowWithinCohort, which the portal leaves to
        its default (policy Never): set to anything else, Kueue would refuse reclaimWithinCohort Never."""
        queue = render_cluster_queue(tenant_queue(), PlatformSpec(reclaim_within_cohort="Never"))
        queue["spec"]["preemption"]["borrowWithinCohort"] = {"policy": "LowerPriority"}
        with pytest.raises(SchemaError, match=PREEMPTION_RULE):
            assert_valid(queue)
        queue["spec"]["preemption"]["reclaimWithinCohort"] = "LowerPriority"
        assert_valid(queue)

    def test_a_value_kueue_does_not_know_is_refused_by_the_crd(self) -> None:
        queue = render_cluster_queue(tenant_queue(), PlatformSpec(within_cluster_queue="Any"))
        with pytest.raises(SchemaError, match="spec.preemption.withinClusterQueue: 'Any' is not one of"):
            assert_valid(queue)

    def test_other_platform_settings_leave_preemption_alone(self) -> None:
        platform = replace(PlatformSpec(), queueing_strategy="StrictFIFO", reclaim_within_cohort="LowerPriority")
        spec = render_cluster_queue(tenant_queue(), platform)["spec"]
        assert (spec["queueingStrategy"], spec["preemption"]["reclaimWithinCohort"]) == ("StrictFIFO", "LowerPriority")
        assert spec["preemption"]["withinClusterQueue"] == "LowerPriority"


class TestValuesAndWords:
    @pytest.mark.parametrize("field", list(SETTINGS))
    def test_the_values_offered_are_exactly_the_crds(self, field: str) -> None:
        _, words = SETTINGS[field]
        assert set(words) == set(preemption_schema()["properties"][field]["enum"])

    def test_the_settings_say_what_each_chosen_value_implies(self) -> None:
        shown = preemption_settings(PlatformSpec(reclaim_within_cohort="Never", within_cluster_queue="Never"))
        assert shown == {
            "reclaimWithinCohort": {
                "value": "Never",
                "setting": "KUEUE_RECLAIM_WITHIN_COHORT",
                "behaviour": RECLAIM_WITHIN_COHORT["Never"],
            },
            "withinClusterQueue": {
                "value": "Never",
                "setting": "KUEUE_WITHIN_CLUSTER_QUEUE",
                "behaviour": WITHIN_CLUSTER_QUEUE["Never"],
            },
        }

    def test_the_default_words_are_the_ones_the_issue_asks_for(self) -> None:
        shown = preemption_settings(PlatformSpec())
        assert shown["reclaimWithinCohort"]["behaviour"].startswith(
            "a tenant takes back its own nominal quota from borrowers in the cohort whatever their priority"
        )
        assert shown["withinClusterQueue"]["behaviour"] == (
            "inside a tenant's queue a deployment of a higher priority tier may evict a lower-priority one "
            "to be admitted"
        )

    @pytest.mark.parametrize("words", [RECLAIM_WITHIN_COHORT, WITHIN_CLUSTER_QUEUE])
    def test_each_value_has_its_own_words(self, words: dict[str, str]) -> None:
        assert len(set(words.values())) == len(words) and all(words.values())
