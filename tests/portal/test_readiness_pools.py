"""Readiness of the Karpenter pools (runtime/readiness_pools.py) and the queueing strategy, on
the API test server: each pool's nodes and the node claims still on their way, as a platform
admin sees them on the readiness page and in its API."""

from __future__ import annotations

from runtime import k8s
from runtime.k8s.kinds import NODECLAIM
from tests.portal.test_readiness import by_key, healthy, not_green, prometheus  # noqa: F401 (fixtures)
from tests.support.k8s.readiness import H100_LABELS, node


def claim(name: str, pool: str, conditions: dict[str, tuple[str, str]]) -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}},
        "status": {"conditions": [{"type": t, "status": s, "reason": r} for t, (s, r) in conditions.items()]},
    }


def provisioned(world) -> None:
    world.h100.provisioning = {
        "capacity_types": ["spot"],
        "instance_types": [],
        "consolidate_after": "5m",
        "expire_after": "720h",
        "node_class": "",
    }
    world.h100.save()


def test_each_pool_shows_its_nodes_and_pending_claims(healthy, world):  # noqa: F811
    provisioned(world)
    healthy.put(k8s.NODE, node("ip-10-0-0-1", {**H100_LABELS, "karpenter.sh/nodepool": "h100-sxm5"}, 8))
    healthy.put(
        NODECLAIM,
        claim("h100-sxm5-abcde", "h100-sxm5", {"Launched": ("True", "Launched"), "Registered": ("Unknown", "")}),
    )
    healthy.put(NODECLAIM, claim("h100-sxm5-done", "h100-sxm5", {"Initialized": ("True", "Initialized")}))
    healthy.put(NODECLAIM, claim("other-x", "other", {}))
    checks = by_key()
    pool = checks["pool:h100-sxm5"]
    assert pool["status"] == "green"
    assert pool["detail"] == (
        "1 node(s), 8 GPUs: ip-10-0-0-1. Pending node claims: h100-sxm5-abcde (waiting to be registered)."
    )
    assert "api:karpenter.sh" in checks and not_green(checks) == {}


def test_a_claim_that_failed_to_launch_is_amber_with_the_reason(healthy, world):  # noqa: F811
    provisioned(world)
    healthy.put(NODECLAIM, claim("h100-sxm5-x", "h100-sxm5", {"Launched": ("False", "InsufficientCapacity")}))
    pool = by_key()["pool:h100-sxm5"]
    assert pool["status"] == "amber" and "Launched: InsufficientCapacity" in pool["detail"]
    assert "instance types" in pool["fix"]


def test_without_karpenter_a_provisioned_flavor_is_red(healthy, world):  # noqa: F811
    provisioned(world)
    healthy.undeclare(NODECLAIM)
    checks = by_key()
    assert checks["pools"]["status"] == "red" and "Install Karpenter" in checks["pools"]["fix"]


def test_the_queueing_strategy_is_shown(healthy, settings):  # noqa: F811
    settings.KUEUE_QUEUEING_STRATEGY = "StrictFIFO"
    check = by_key()["kueue:queueing"]
    assert check["status"] == "green" and "StrictFIFO" in check["detail"]


def test_no_pool_no_karpenter_check(healthy):  # noqa: F811
    checks = by_key()
    assert not any(key.startswith("pool") for key in checks) and "api:karpenter.sh" not in checks


def test_the_cluster_page_and_api_show_the_queueing_strategy(world, settings):
    settings.KUEUE_QUEUEING_STRATEGY = "StrictFIFO"
    page = world.browser("platform_admin").get("/cluster/").content.decode()
    assert "<strong>StrictFIFO</strong>" in page
    body = world.client("platform_admin").get("/api/v1/cluster/sweep/").json()
    assert body["queueing_strategy"] == "StrictFIFO"


def test_nodes_of_a_topology_flavor_must_carry_every_level(healthy, world):  # noqa: F811
    world.h100.topology_levels = ["cloud.example.com/block", "kubernetes.io/hostname"]
    world.h100.save()
    check = by_key()["topology:h100-sxm5"]
    assert check["status"] == "amber"
    assert (
        check["detail"]
        == "1 of 1 node(s) lack topology labels: p5-0 (no cloud.example.com/block, kubernetes.io/hostname)."
    )
    labels = {**H100_LABELS, "cloud.example.com/block": "b1", "kubernetes.io/hostname": "p5-0"}
    healthy.put(
        k8s.NODE, node("p5-0", labels, 8, [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    )
    check = by_key()["topology:h100-sxm5"]
    assert (check["status"], check["detail"]) == ("green", "1 node(s) in 1 cloud.example.com/block domain(s).")
