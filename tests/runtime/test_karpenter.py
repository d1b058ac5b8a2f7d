"""Karpenter NodePool / EC2NodeClass and Kueue Topology renderers: golden files, the real CRD
schemas and their CEL rules, and the behaviour each field is there for.

Regenerate the golden files after an intended change with
`UPDATE_GOLDEN=1 pytest tests/runtime/test_karpenter.py` and review the diff.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

import celpy
import pytest
import yaml

from runtime.manifests import kueue
from runtime.manifests.karpenter import (
    ANNOTATION_DO_NOT_DISRUPT,
    ami_alias_problem,
    device_plugin_untolerated,
    render_ec2nodeclass,
    render_nodepool,
)
from runtime.manifests.kserve import render_inferenceservice
from runtime.manifests.rayservice import render_rayservice
from runtime.manifests.topology import (
    ANNOTATION_REQUIRED,
    ANNOTATION_SLICE_REQUIRED,
    ANNOTATION_SLICE_SIZE,
    TAS_ANNOTATION_PREFIX,
    render_topology,
)
from runtime.spec import NodeClassSpec, NodePoolSpec, Toleration
from tests.runtime.test_manifests import (
    GOLDEN,
    H100,
    PLATFORM,
    _GoldenDumper,
    large_spec,
    small_spec,
    tenant_queue,
    worker_group,
)
from tests.support.crd import SchemaError, _cel_program, assert_valid  # the checker's CEL compiler

LEVELS = ("cloud.example.com/block", "cloud.example.com/rack", "kubernetes.io/hostname")
H100_TAS = replace(
    H100,
    node_labels=(("node.kubernetes.io/instance-type", "p5.48xlarge"), *H100.node_labels),
    topology_levels=LEVELS,
)
AWS = NodeClassSpec(
    role="KarpenterNodeRole-gpu",
    subnet_tags=(("karpenter.sh/discovery", "gpu-cluster"),),
    security_group_tags=(("karpenter.sh/discovery", "gpu-cluster"),),
    # A real AL2023 EKS AMI release (aws/karpenter-provider-aws v1.14.1,
    # website/content/en/docs/concepts/nodeclasses.md pins this one).
    ami_alias="al2023@v20240807",
)
OTHER = NodeClassSpec(aws=False, group="karpenter.azure.com", kind="AKSNodeClass", name="gpu")


def pool(**changes: Any) -> NodePoolSpec:
    spec = NodePoolSpec(
        flavor=H100_TAS,
        gpu_limit=24,
        capacity_types=("spot", "on-demand"),
        consolidate_after="10m",
        expire_after="336h",
    )
    return replace(spec, **changes)


GOLDEN_CASES = {
    "nodepool_aws": lambda: render_nodepool(pool(), AWS),
    "nodepool_other": lambda: render_nodepool(
        pool(capacity_types=("on-demand",), instance_types=("p5.48xlarge",), expire_after="Never"), OTHER
    ),
    "ec2nodeclass": lambda: render_ec2nodeclass("h100-sxm", AWS),
    "topology": lambda: render_topology(H100_TAS),
    "resourceflavor_topology": lambda: kueue.render_resource_flavor(H100_TAS),
}
SCHEMA_CASES = {
    **GOLDEN_CASES,
    "nodepool_zero_limit_no_taints": lambda: render_nodepool(
        pool(gpu_limit=0, flavor=replace(H100, tolerations=())), AWS
    ),
    "clusterqueue_strict_fifo": lambda: kueue.render_cluster_queue(
        tenant_queue(),
        replace(PLATFORM, queueing_strategy="StrictFIFO"),
    ),
    "rayservice_topology_multi_node": lambda: render_rayservice(large_spec(flavor=H100_TAS), PLATFORM),
    "rayservice_topology_single_node": lambda: render_rayservice(
        large_spec(flavor=H100_TAS, pipeline_parallel_size=1), PLATFORM
    ),
    "kserve_topology": lambda: render_inferenceservice(small_spec(flavor=H100_TAS, backend="kserve"), PLATFORM),
    "ec2nodeclass_bottlerocket": lambda: render_ec2nodeclass(
        "h100-sxm", replace(AWS, ami_alias="bottlerocket@v1.10.0")
    ),
    "ec2nodeclass_latest_opted_in": lambda: render_ec2nodeclass(
        "h100-sxm", replace(AWS, ami_alias="al2023@latest", ami_allow_latest=True)
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_rendered_object_matches_golden_file(case: str) -> None:
    rendered = GOLDEN_CASES[case]()
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(yaml.dump(rendered, Dumper=_GoldenDumper, sort_keys=False, width=100))
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 and review it"
    assert rendered == yaml.safe_load(path.read_text())


class TestSchemasAndCelRules:
    @pytest.mark.parametrize("case", sorted(SCHEMA_CASES))
    def test_rendered_object_is_valid_with_every_rule_it_reaches(self, case: str) -> None:
        report = assert_valid(SCHEMA_CASES[case]())
        assert not report.failures

    def test_a_hostname_template_label_fails_the_nodepool_cel_rule(self) -> None:
        obj = render_nodepool(pool(), AWS)
        obj["spec"]["template"]["metadata"]["labels"]["kubernetes.io/hostname"] = "x"
        with pytest.raises(SchemaError, match="hostname"):
            assert_valid(obj)

    def test_a_topology_with_the_host_above_another_level_fails_its_cel_rule(self) -> None:
        obj = render_topology(H100_TAS)
        obj["spec"]["levels"].reverse()
        with pytest.raises(SchemaError, match="lowest level"):
            assert_valid(obj)

    def test_an_ec2nodeclass_with_role_and_instance_profile_fails_its_cel_rule(self) -> None:
        obj = render_ec2nodeclass("h100-sxm", AWS)
        obj["spec"]["instanceProfile"] = "profile"
        with pytest.raises(SchemaError):
            assert_valid(obj)


class TestNodePool:
    def test_nodes_carry_the_flavors_labels_and_taints_so_kueue_and_karpenter_agree(self) -> None:
        obj = render_nodepool(pool(), AWS)
        template = obj["spec"]["template"]
        # Custom labels and the portal's pinning label are set on the node; the instance type is
        # required (Karpenter sets it).
        assert template["metadata"]["labels"] == {**dict(H100.node_labels), "llm-portal.io/flavor": H100.name}
        requirements = {r["key"]: r["values"] for r in template["spec"]["requirements"]}
        assert requirements["node.kubernetes.io/instance-type"] == ["p5.48xlarge"]
        assert requirements["karpenter.k8s.aws/instance-gpu-count"] == ["8"]
        assert requirements["karpenter.k8s.aws/instance-gpu-manufacturer"] == ["nvidia"]
        assert requirements["karpenter.sh/capacity-type"] == ["spot", "on-demand"]
        # Each keyed toleration of the ResourceFlavor is a taint; Exists drops the value.
        assert template["spec"]["taints"] == [
            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"key": "dedicated", "effect": "NoExecute", "value": "inference"},
        ]

    def test_limit_disruption_and_expiry_follow_the_spec(self) -> None:
        spec = render_nodepool(pool(), AWS)["spec"]
        assert spec["limits"] == {"nvidia.com/gpu": 24}
        assert spec["disruption"] == {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "10m",
            "budgets": [{"nodes": "0", "reasons": ["Drifted", "Underutilized"]}],
        }
        assert spec["template"]["spec"]["expireAfter"] == "336h"

    def test_off_aws_the_pool_names_the_configured_node_class_and_no_aws_labels(self) -> None:
        spec = render_nodepool(pool(node_class_name="gpu-big"), OTHER)["spec"]["template"]["spec"]
        assert spec["nodeClassRef"] == {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "gpu-big"}
        assert not any(r["key"].startswith("karpenter.k8s.aws/") for r in spec["requirements"])

    def test_off_aws_without_a_node_class_it_refuses(self) -> None:
        with pytest.raises(ValueError, match="KARPENTER_NODE_CLASS_NAME"):
            render_nodepool(pool(), replace(OTHER, name=""))

    def test_an_ec2nodeclass_without_platform_settings_is_refused(self) -> None:
        with pytest.raises(ValueError, match="KARPENTER_NODE_ROLE"):
            render_ec2nodeclass("h100-sxm", NodeClassSpec())

    def test_a_toleration_without_key_makes_no_taint_but_the_gpu_taint_stays(self) -> None:
        flavor = replace(H100_TAS, tolerations=(Toleration(key="", operator="Exists"),))
        taints = render_nodepool(pool(flavor=flavor), AWS)["spec"]["template"]["spec"]["taints"]
        assert taints == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]  # Ray heads stay off


class TestDisruption:
    """Issue 39: Karpenter must never take a node serving a model on its own initiative."""

    def test_a_gpu_pool_never_disrupts_for_drift_or_packing_but_removes_empty_nodes(self) -> None:
        disruption = render_nodepool(pool(), AWS)["spec"]["disruption"]
        assert disruption["consolidationPolicy"] == "WhenEmpty"
        # Karpenter takes the smallest active budget that names the reason or names none
        # (pkg/apis/v1/nodepool.go GetAllowedDisruptionsByReason, v1.14.1); none: unbounded.
        budgets = disruption["budgets"]
        allowed = {
            reason: min((int(b["nodes"]) for b in budgets if reason in b.get("reasons", [reason])), default=None)
            for reason in ("Drifted", "Underutilized", "Empty")
        }
        assert allowed == {"Drifted": 0, "Underutilized": 0, "Empty": None}

    def test_every_serving_pod_carries_do_not_disrupt(self) -> None:
        ray = render_rayservice(large_spec(), PLATFORM)["spec"]["rayClusterConfig"]
        head = ray["headGroupSpec"]["template"]["metadata"]["annotations"]
        worker = worker_group(render_rayservice(large_spec(), PLATFORM))["template"]["metadata"]["annotations"]
        predictor = render_inferenceservice(small_spec(backend="kserve"), PLATFORM)["spec"]["predictor"]["annotations"]
        # The key and value Karpenter reads (pkg/apis/v1/labels.go DoNotDisruptAnnotationKey, and
        # pkg/utils/pod/scheduling.go IsDoNotDisruptActive: "true" blocks for good), v1.14.1.
        for pod in (head, worker, predictor):
            assert pod["karpenter.sh/do-not-disrupt"] == "true"

    def test_the_annotation_does_not_recreate_running_ray_clusters(self) -> None:
        """Running clusters keep their pods on upgrade; the Drifted budget covers them meanwhile."""
        from runtime.backends.kuberay import _cluster_part

        obj = render_rayservice(large_spec(), PLATFORM)
        before = json.loads(json.dumps(obj))
        config = before["spec"]["rayClusterConfig"]
        for group in (config["headGroupSpec"], *config["workerGroupSpecs"]):
            group["template"]["metadata"]["annotations"].pop(ANNOTATION_DO_NOT_DISRUPT)
        assert before != obj and _cluster_part(before) == _cluster_part(obj)


class TestAmiAlias:
    @pytest.mark.parametrize(
        ("alias", "allow_latest", "message"),
        [
            ("al2023@v20240807", False, None),
            ("al2@v20240807", False, None),
            ("bottlerocket@v1.10.0", False, None),
            ("bottlerocket@1.10.0", False, None),  # the provider drops a leading "v" (bottlerocket.go)
            ("al2023@latest", True, None),
            ("", False, "not set: pin an AMI release"),
            ("al2023@latest", False, "@latest replaces every GPU node"),
            ("bottlerocket@latest", False, "KARPENTER_AMI_ALLOW_LATEST"),
            ("al2023@20240807", False, "al2023 AMI releases are named like al2023@v20240807"),
            ("al2023@v2024-08-07", False, "named like"),
            ("bottlerocket@v1.10", False, "bottlerocket@v1.10.0"),
            ("windows2022@latest", True, "is not an AMI alias"),  # no GPU pod of the portal runs there
            ("al2023", False, "is not an AMI alias"),
            ("AL2023@v20240807", False, "is not an AMI alias"),
            ("al2023@v20240807" + "0" * 15, False, "at most 30 characters"),
        ],
    )
    def test_only_a_pinned_release_passes_unless_latest_is_opted_into(self, alias, allow_latest, message) -> None:
        problem = ami_alias_problem(alias, allow_latest=allow_latest)
        assert problem is None if message is None else message in (problem or "")

    def test_the_ec2nodeclass_is_not_rendered_with_latest_or_without_an_alias(self) -> None:
        with pytest.raises(ValueError, match="KARPENTER_AMI_ALIAS 'al2023@latest': @latest"):
            render_ec2nodeclass("h100-sxm", replace(AWS, ami_alias="al2023@latest"))
        with pytest.raises(ValueError, match="KARPENTER_AMI_ALIAS not set"):
            render_ec2nodeclass("h100-sxm", replace(AWS, ami_alias=""))
        assert render_ec2nodeclass("h100-sxm", AWS)["spec"]["amiSelectorTerms"] == [{"alias": "al2023@v20240807"}]


class TestDevicePlugin:
    """NVIDIA/k8s-device-plugin v0.20.0 tolerates CriticalAddonsOnly (any effect) and
    nvidia.com/gpu:NoSchedule (Exists); a node taint beyond them keeps it off the node."""

    @pytest.mark.parametrize(
        ("tolerations", "untolerated"),
        [
            ((), []),
            ((Toleration(key="nvidia.com/gpu", value="present"),), []),
            ((Toleration(key="CriticalAddonsOnly", effect="NoExecute"),), []),
            ((Toleration(key="dedicated", value="gpu", effect="PreferNoSchedule"),), []),
            (
                (Toleration(key="dedicated", value="inference", effect="NoExecute"),),
                [{"key": "dedicated", "effect": "NoExecute", "value": "inference"}],
            ),
            (
                (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoExecute"),),
                [{"key": "nvidia.com/gpu", "effect": "NoExecute"}],
            ),
            ((Toleration(key="team", operator="Exists"),), [{"key": "team", "effect": "NoSchedule"}]),
        ],
    )
    def test_taints_the_plugin_does_not_tolerate_are_named(self, tolerations, untolerated) -> None:
        spec = pool(flavor=replace(H100_TAS, tolerations=tolerations))
        assert device_plugin_untolerated(spec) == untolerated


class TestTopologyPlacement:
    def test_the_resource_flavor_names_the_topology_only_when_the_flavor_has_levels(self) -> None:
        assert kueue.render_resource_flavor(H100_TAS)["spec"]["topologyName"] == "h100-sxm"
        assert "topologyName" not in kueue.render_resource_flavor(H100)["spec"]

    def test_a_replica_across_nodes_is_required_inside_one_block_per_replica(self) -> None:
        group = worker_group(render_rayservice(large_spec(flavor=H100_TAS), PLATFORM))
        assert group["template"]["metadata"]["annotations"] == {
            ANNOTATION_SLICE_REQUIRED: "cloud.example.com/block",
            ANNOTATION_SLICE_SIZE: "2",  # TP 8 x PP 2 on 8-GPU nodes: two pods per replica
            ANNOTATION_DO_NOT_DISRUPT: "true",
        }

    def test_a_single_node_replica_is_required_on_one_host(self) -> None:
        group = worker_group(render_rayservice(large_spec(flavor=H100_TAS, pipeline_parallel_size=1), PLATFORM))
        assert group["template"]["metadata"]["annotations"] == {
            ANNOTATION_SLICE_REQUIRED: "kubernetes.io/hostname",
            ANNOTATION_SLICE_SIZE: "1",
            ANNOTATION_DO_NOT_DISRUPT: "true",
        }
        predictor = render_inferenceservice(small_spec(flavor=H100_TAS, backend="kserve"), PLATFORM)["spec"][
            "predictor"
        ]
        assert predictor["annotations"][ANNOTATION_REQUIRED] == "kubernetes.io/hostname"

    def test_without_levels_nothing_changes(self) -> None:
        group = worker_group(render_rayservice(large_spec(), PLATFORM))
        assert not any(key.startswith(TAS_ANNOTATION_PREFIX) for key in group["template"]["metadata"]["annotations"])
        predictor = render_inferenceservice(small_spec(backend="kserve"), PLATFORM)["spec"]["predictor"]
        assert ANNOTATION_REQUIRED not in predictor["annotations"]

    def test_queueing_strategy_follows_the_platform_setting(self) -> None:
        assert kueue.render_cluster_queue(tenant_queue(), PLATFORM)["spec"]["queueingStrategy"] == "BestEffortFIFO"
        strict = replace(PLATFORM, queueing_strategy="StrictFIFO")
        assert kueue.render_cluster_queue(tenant_queue(), strict)["spec"]["queueingStrategy"] == "StrictFIFO"


class TestRulesCelPythonCannotRunAlone:
    """The CEL check skips transition rules (oldSelf) and rules using Kubernetes' string
    extensions; here each such rule that guards what the portal renders is run by hand."""

    def test_no_requirement_key_or_template_label_lies_in_the_karpenter_sh_domain(self) -> None:
        # NodePool rule: self in [capacity-type, nodepool] || !self.find("^([^/]+)").endsWith("karpenter.sh")
        for obj in (render_nodepool(pool(), AWS), render_nodepool(pool(), OTHER)):
            template = obj["spec"]["template"]
            keys = [r["key"] for r in template["spec"]["requirements"]]
            keys += list((template.get("metadata") or {}).get("labels") or {})
            for key in keys:
                domain = key.split("/", 1)[0] if "/" in key else key
                assert key == "karpenter.sh/capacity-type" or not domain.endswith("karpenter.sh"), key

    @pytest.mark.parametrize("alias", ["al2023@v20240807", "bottlerocket@v1.10.0", "al2@v20240807"])
    def test_an_alias_the_portal_accepts_passes_the_ec2nodeclass_family_rules(self, alias: str) -> None:
        # aws/karpenter-provider-aws v1.14.1 CRD, amiSelectorTerms[].alias (split() is a string
        # extension the CEL check skips): the family must be known, Windows only with "latest".
        assert ami_alias_problem(alias, allow_latest=False) is None
        rendered = render_ec2nodeclass("h100-sxm", replace(AWS, ami_alias=alias))["spec"]["amiSelectorTerms"][0]
        family, _, version = rendered["alias"].partition("@")
        assert family in ["al2", "al2023", "bottlerocket", "windows2019", "windows2022", "windows2025"]
        assert not family.startswith("windows") or version == "latest"

    @pytest.mark.parametrize(
        ("old", "new", "allowed"),
        [
            (LEVELS, LEVELS[:1] + LEVELS[2:], True),  # drop the rack level: hostname stays last
            (LEVELS, ("cloud.example.com/zone", *LEVELS), True),
            (LEVELS, LEVELS[:2], False),  # the host level may not go (the portal refuses it too)
        ],
    )
    def test_topology_levels_may_change_while_the_host_stays_last(self, old, new, allowed) -> None:
        rule = (
            "self == oldSelf || (self[size(self) - 1].nodeLabel == 'kubernetes.io/hostname' && "
            "oldSelf[size(oldSelf) - 1].nodeLabel == 'kubernetes.io/hostname')"
        )
        before = render_topology(replace(H100_TAS, topology_levels=old))["spec"]["levels"]
        after = render_topology(replace(H100_TAS, topology_levels=new))["spec"]["levels"]
        result = _cel_program(rule).evaluate({"self": celpy.json_to_cel(after), "oldSelf": celpy.json_to_cel(before)})
        assert bool(result) is allowed


def test_topology_levels_added_to_a_flavor_do_not_recreate_running_ray_clusters() -> None:
    """The kuberay backend recreates a RayService when its cluster part changes; Kueue's
    topology annotations count for admission only, so they are not part of it."""
    from runtime.backends.kuberay import _cluster_part

    before = render_rayservice(large_spec(flavor=replace(H100_TAS, topology_levels=())), PLATFORM)
    after = render_rayservice(large_spec(flavor=H100_TAS), PLATFORM)
    assert worker_group(before)["template"] != worker_group(after)["template"]
    assert _cluster_part(before) == _cluster_part(after)
