"""Priority tiers on the cluster (issue 35): the WorkloadPriorityClass each tier is, valid against
Kueue's CRD schema (../shared/schemas/crds/kueue.x-k8s.io_workloadpriorityclasses.yaml, CEL
included), and the label that gives a deployment's workload its class, on both cluster backends."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtime.manifests.common import LABEL_PRIORITY_CLASS, LABEL_QUEUE_NAME
from runtime.manifests.kserve import render_inferenceservice
from runtime.manifests.kueue import render_workload_priority_class
from runtime.manifests.rayservice import render_rayservice
from runtime.spec import PlatformSpec, PriorityClassSpec
from tests.runtime.test_manifests import small_spec
from tests.support.crd import assert_valid


def test_a_tier_is_a_valid_workload_priority_class() -> None:
    obj = render_workload_priority_class(PriorityClassSpec("llm-portal-production", 1000, "Customer traffic."))
    assert obj == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "llm-portal-production", "labels": {"app.kubernetes.io/managed-by": "llm-portal"}},
        "value": 1000,
        "description": "Customer traffic.",
    }
    assert_valid(obj)
    assert "description" not in render_workload_priority_class(PriorityClassSpec("llm-portal-x", -5))


@pytest.mark.parametrize("render", [render_rayservice, render_inferenceservice])
def test_the_workload_carries_its_class_and_none_without_a_tier(render) -> None:
    backend = "kserve" if render is render_inferenceservice else "kuberay"
    plain = render(replace(small_spec(), backend=backend), PlatformSpec())
    tiered = render(replace(small_spec(), backend=backend, priority_class="llm-portal-production"), PlatformSpec())
    labels = tiered["metadata"]["labels"]
    assert labels[LABEL_PRIORITY_CLASS] == "llm-portal-production" and LABEL_QUEUE_NAME in labels
    assert LABEL_PRIORITY_CLASS not in plain["metadata"]["labels"]
    assert_valid(tiered)
