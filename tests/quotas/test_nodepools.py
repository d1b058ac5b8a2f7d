"""Karpenter NodePools, EC2NodeClasses and Kueue Topologies: kept by the Kueue sync through the
real `kubernetes` client against the API test server, and the provisioning settings refused
with field errors before anything reaches a cluster."""

from __future__ import annotations

import pytest

from core.exceptions import DomainError
from quotas import flavors, services
from quotas.kueue import sync_kueue
from quotas.models import GpuFlavor
from quotas.nodepools import gpu_limit, pool_summary
from runtime import k8s
from runtime.k8s.kinds import EC2NODECLASS, NODEPOOL, TOPOLOGY
from tests.support.crd import assert_valid

LEVELS = ["cloud.example.com/block", "cloud.example.com/rack", "kubernetes.io/hostname"]
POOL = {"capacity_types": ["spot", "on-demand"], "consolidate_after": "10m"}


@pytest.fixture
def aws(settings):
    settings.KARPENTER_PLATFORM = "aws"
    settings.KARPENTER_NODE_ROLE = "KarpenterNodeRole-test"
    settings.KARPENTER_SUBNET_TAGS = {"karpenter.sh/discovery": "test"}
    settings.KARPENTER_SECURITY_GROUP_TAGS = {"karpenter.sh/discovery": "test"}
    settings.KARPENTER_AMI_ALIAS = "al2023@v20240807"
    return settings


def provision(world, provisioning=POOL, levels=None) -> GpuFlavor:
    return flavors.flavor_save(
        actor=world.users["platform_admin"],
        name="h100-sxm5",
        values={"provisioning": provisioning, "topology_levels": [] if levels is None else levels},
    )


def with_topology(world) -> GpuFlavor:
    """Topology levels on the A100 flavor: a flavor has a pool or a topology, never both."""
    return flavors.flavor_save(
        actor=world.users["platform_admin"],
        name="a100-pcie",
        values={"node_labels": {"cloud.example.com/gpu": "a100"}, "topology_levels": LEVELS},
    )


def stored(obj: dict) -> dict:
    """What the portal wrote, without what the server adds."""
    clean = {k: v for k, v in obj.items() if k != "status"}
    clean["metadata"] = {k: v for k, v in obj["metadata"].items() if k in ("name", "labels", "annotations")}
    return clean


class TestSync:
    def test_it_applies_valid_pool_node_class_and_topology_then_writes_nothing(self, world, cluster_api, aws):
        provision(world)
        with_topology(world)
        assert sync_kueue() > 0
        pool = cluster_api.get_object(NODEPOOL, "h100-sxm5")
        node_class = cluster_api.get_object(EC2NODECLASS, "h100-sxm5")
        topology = cluster_api.get_object(TOPOLOGY, "a100-pcie")
        flavor = cluster_api.get_object(k8s.RESOURCEFLAVOR, "a100-pcie")
        for obj in (pool, node_class, topology, flavor):
            assert_valid(stored(obj))
        # alpha 8 + beta 8 nominal H100s (borrowing adds no GPUs): two 8-GPU nodes.
        assert pool["spec"]["limits"] == {"nvidia.com/gpu": 16}
        assert pool["spec"]["template"]["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
        assert pool["spec"]["disruption"]["budgets"] == [{"nodes": "0", "reasons": ["Drifted", "Underutilized"]}]
        assert node_class["spec"]["amiSelectorTerms"] == [{"alias": "al2023@v20240807"}]
        assert [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]] == LEVELS
        assert flavor["spec"]["topologyName"] == "a100-pcie"
        assert sync_kueue() == 0  # idempotent: nothing changed, nothing written
        assert cluster_api.get_object(NODEPOOL, "a100-pcie") is None  # not provisioned

    def test_a_quota_change_moves_the_pool_limit_in_whole_nodes(self, world, cluster_api, aws):
        provision(world)
        sync_kueue()
        services.quota_set(tenant=world.beta, flavor=world.h100, actor=world.users["platform_admin"], nominal_gpus=9)
        world.h100.refresh_from_db()
        assert gpu_limit(world.h100) == 24  # 17 GPUs need three 8-GPU nodes
        sync_kueue()
        assert cluster_api.get_object(NODEPOOL, "h100-sxm5")["spec"]["limits"] == {"nvidia.com/gpu": 24}

    def test_clearing_provisioning_deletes_the_portals_pool_but_not_anothers(self, world, cluster_api, aws):
        provision(world)
        sync_kueue()
        foreign = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "system"}, "spec": {}}
        cluster_api.emulator.objects[NODEPOOL.key, None, "system"] = foreign
        provision(world, provisioning={})
        assert sync_kueue() == 2  # the NodePool and its EC2NodeClass, deleted
        assert cluster_api.get_object(NODEPOOL, "h100-sxm5") is None
        assert cluster_api.get_object(EC2NODECLASS, "h100-sxm5") is None
        assert cluster_api.get_object(NODEPOOL, "system") is not None

    def test_off_aws_the_pool_names_the_configured_node_class_and_no_ec2nodeclass_is_made(
        self, world, cluster_api, settings
    ):
        settings.KARPENTER_PLATFORM = "azure"
        settings.KARPENTER_NODE_CLASS_GROUP = "karpenter.azure.com"
        settings.KARPENTER_NODE_CLASS_KIND = "AKSNodeClass"
        settings.KARPENTER_NODE_CLASS_NAME = "default"
        provision(world, provisioning={"capacity_types": ["on-demand"], "node_class": "gpu"})
        sync_kueue()
        pool = cluster_api.get_object(NODEPOOL, "h100-sxm5")
        assert pool["spec"]["template"]["spec"]["nodeClassRef"] == {
            "group": "karpenter.azure.com",
            "kind": "AKSNodeClass",
            "name": "gpu",
        }
        assert cluster_api.get_object(EC2NODECLASS, "h100-sxm5") is None

    def test_missing_aws_settings_skip_the_pool_but_the_queues_still_sync(self, world, cluster_api, settings):
        settings.KARPENTER_PLATFORM = "aws"
        settings.KARPENTER_NODE_ROLE = ""
        provision(world)
        sync_kueue()
        assert cluster_api.get_object(EC2NODECLASS, "h100-sxm5") is None
        assert cluster_api.get_object(k8s.CLUSTERQUEUE, "tenant-alpha") is not None


class TestProvisioningSettings:
    def test_defaults_are_filled_in_so_readers_need_not_repeat_them(self, world):
        flavor = provision(world, provisioning={"capacity_types": ["spot"]}, levels=[])
        assert flavor.provisioning == {
            "capacity_types": ["spot"],
            "instance_types": [],
            "consolidate_after": "5m",
            "expire_after": "720h",
            "node_class": "",
        }

    @pytest.mark.parametrize(
        ("provisioning", "message"),
        [
            ({"capacity_types": ["on-demand", "spot"]}, "prefers spot"),
            ({"capacity_types": ["reserved"]}, "spot"),
            ({"capacity_types": []}, "spot"),
            ({"capacity_types": "spot"}, "list of strings"),
            ({"capacity_types": ["spot", "spot"]}, "at most once"),
            ({"instance_types": ["p5.48xlarge\nkey: value"]}, "instance type"),
            ({"instance_types": [{"nested": ["x"]}]}, "list of strings"),
            ({"instance_types": ["m5.large"] * 51}, "at most 50"),
            ({"instance_types": ["g6.xlarge"]}, "node label node.kubernetes.io/instance-type"),
            ({"consolidate_after": "5 minutes"}, "duration"),
            ({"expire_after": 720}, "duration"),
            ({"node_class": "../etc"}, "node class"),
            ({"taints": [{"key": "x"}]}, "Unknown provisioning key"),
            (["spot"], "must be an object"),
        ],
    )
    def test_bad_values_are_refused_with_the_field(self, world, provisioning, message):
        with pytest.raises(DomainError, match=message) as caught:
            provision(world, provisioning=provisioning, levels=[])
        assert caught.value.field == "provisioning"
        world.h100.refresh_from_db()
        assert world.h100.provisioning == {}  # nothing half-written

    def test_a_flavor_without_node_labels_cannot_be_provisioned(self, world):
        with pytest.raises(DomainError, match="needs node labels"):
            flavors.flavor_save(actor=world.users["platform_admin"], name="a100-pcie", values={"provisioning": POOL})

    def test_a_toleration_that_cannot_be_a_taint_is_refused(self, world):
        bad = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "a b:NoSchedule", "effect": "NoSchedule"}]
        # A toleration's value is held to the label-value syntax whether or not it becomes a taint.
        with pytest.raises(DomainError, match="is not a label value"):
            flavors.flavor_save(
                actor=world.users["platform_admin"], name="h100-sxm5", values={"tolerations": bad, "provisioning": POOL}
            )

    def test_a_node_label_in_karpenters_domain_is_refused(self, world):
        labels = {"karpenter.sh/nodepool": "other"}
        with pytest.raises(DomainError, match="domain Karpenter keeps"):
            flavors.flavor_save(
                actor=world.users["platform_admin"],
                name="h100-sxm5",
                values={"node_labels": labels, "provisioning": POOL},
            )


class TestTopologyWithAPool:
    """Issue 39: Kueue places topology-aware pods only on Ready nodes and Karpenter adds nodes only
    for pods it placed, so a topology flavor's pool at zero nodes never grows (deadlock)."""

    def test_a_flavor_with_levels_cannot_be_provisioned(self, world):
        with pytest.raises(DomainError, match="cannot be provisioned by Karpenter") as caught:
            provision(world, levels=LEVELS)
        assert caught.value.field == "provisioning"
        world.h100.refresh_from_db()
        assert (world.h100.provisioning, world.h100.topology_levels) == ({}, [])

    def test_a_provisioned_flavor_cannot_gain_levels(self, world):
        provision(world)
        with pytest.raises(DomainError, match="stay at zero nodes") as caught:
            flavors.flavor_save(
                actor=world.users["platform_admin"], name="h100-sxm5", values={"topology_levels": LEVELS}
            )
        assert caught.value.field == "provisioning"
        assert GpuFlavor.objects.get(name="h100-sxm5").topology_levels == []

    def test_a_flavor_saved_with_both_before_the_rule_says_so_on_its_pool(self, world, aws):
        provision(world)
        GpuFlavor.objects.filter(name="h100-sxm5").update(topology_levels=LEVELS)  # as an older portal saved it
        warnings = pool_summary(GpuFlavor.objects.get(name="h100-sxm5"))["warnings"]
        assert [w for w in warnings if "cannot be provisioned by Karpenter" in w] == warnings and len(warnings) == 1


class TestPoolWarnings:
    def test_a_taint_the_device_plugin_does_not_tolerate_is_a_warning_not_a_refusal(self, world, aws):
        tolerations = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "inference", "effect": "NoExecute"},
        ]
        flavor = flavors.flavor_save(
            actor=world.users["platform_admin"],
            name="h100-sxm5",
            values={"tolerations": tolerations, "provisioning": POOL},
        )
        (warning,) = pool_summary(flavor)["warnings"]
        assert warning.startswith("Taint dedicated=inference:NoExecute: the NVIDIA device plugin's DaemonSet")

    def test_the_gpu_taint_alone_warns_of_nothing(self, world, aws):
        assert pool_summary(provision(world))["warnings"] == []

    def test_an_unpinned_ami_is_the_pools_problem(self, world, aws):
        aws.KARPENTER_AMI_ALIAS = "al2023@latest"
        summary = pool_summary(provision(world))
        assert "@latest replaces every GPU node" in summary["problem"]
        assert summary["manifest"]["kind"] == "NodePool"  # the pool itself still renders


class TestTopologyLevels:
    @pytest.mark.parametrize(
        ("levels", "message"),
        [
            (["kubernetes.io/hostname", "cloud.example.com/block"], "last"),
            (["cloud.example.com/block"], "last"),
            (["a/b", "a/b", "kubernetes.io/hostname"], "at most once"),
            (["bad key!", "kubernetes.io/hostname"], "node label key"),
            ([1, "kubernetes.io/hostname"], "list of node label keys"),
            ("kubernetes.io/hostname", "list of node label keys"),
            ([f"x{i}.example.com/l" for i in range(16)] + ["kubernetes.io/hostname"], "At most 16"),
        ],
    )
    def test_bad_levels_are_refused_with_the_field(self, world, levels, message):
        with pytest.raises(DomainError, match=message) as caught:
            provision(world, provisioning={}, levels=levels)
        assert caught.value.field == "topology_levels"

    def test_levels_can_change_but_not_be_removed(self, world):
        provision(world, provisioning={}, levels=LEVELS)
        provision(world, provisioning={}, levels=["cloud.example.com/block", "kubernetes.io/hostname"])
        with pytest.raises(DomainError, match="not removed") as caught:
            provision(world, provisioning={}, levels=[])
        assert caught.value.field == "topology_levels"

    def test_a_flavor_without_node_labels_cannot_have_a_topology(self, world):
        with pytest.raises(DomainError, match="needs node labels"):
            flavors.flavor_save(
                actor=world.users["platform_admin"], name="a100-pcie", values={"topology_levels": LEVELS}
            )


class TestLabelsKarpenterAccepts:
    @pytest.mark.parametrize(
        ("labels", "refused"),
        [
            ({"node-role.kubernetes.io/gpu": "true"}, True),  # Kubernetes' domain: Karpenter refuses it
            ({"example.k8s.io/pool": "a"}, True),
            ({"node.kubernetes.io/gpu-pool": "a"}, False),  # Karpenter's own exception
            ({"node.kubernetes.io/instance-type": "p5.48xlarge"}, False),  # well known: a requirement
            ({"karpenter.k8s.aws/instance-family": "p5"}, False),
            ({"a b": "c"}, True),
        ],
    )
    def test_node_labels_of_a_provisioned_flavor(self, world, labels, refused):
        values = {"node_labels": labels, "tolerations": [], "provisioning": {"capacity_types": ["spot"]}}
        if refused:
            with pytest.raises(DomainError):
                flavors.flavor_save(actor=world.users["platform_admin"], name="h100-sxm5", values=values)
        else:
            flavor = flavors.flavor_save(actor=world.users["platform_admin"], name="h100-sxm5", values=values)
            assert flavor.provisioning["capacity_types"] == ["spot"]

    def test_node_labels_that_are_not_an_object_are_a_field_error_not_a_crash(self, world):
        with pytest.raises(DomainError) as caught:
            flavors.flavor_save(
                actor=world.users["platform_admin"],
                name="h100-sxm5",
                values={"node_labels": ["x=y"], "provisioning": {"instance_types": ["p5.48xlarge"]}},
            )
        assert caught.value.field in ("node_labels", "provisioning")


class TestAnOlderClusterRole:
    def test_denied_topology_and_pool_calls_do_not_stop_the_queues_from_syncing(self, world, cluster_api, aws):
        provision(world)
        with_topology(world)
        karpenter_or_topology = ("/karpenter.sh/", "/karpenter.k8s.aws/", "/topologies")
        cluster_api.inject_faults(1.0, (403,), when=lambda method, path: any(p in path for p in karpenter_or_topology))
        assert sync_kueue() > 0
        assert cluster_api.get_object(k8s.CLUSTERQUEUE, "tenant-alpha") is not None
        assert cluster_api.get_object(k8s.RESOURCEFLAVOR, "h100-sxm5") is not None
        cluster_api.clear_faults()
        sync_kueue()
        assert cluster_api.get_object(NODEPOOL, "h100-sxm5") is not None
