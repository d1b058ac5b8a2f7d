"""Flavor pinning by the portal's one node label (`llm-portal.io/flavor`, issues 38 and 41).

Seen on Kueue 0.19.2: with flavors `l4` (`nvidia.com/gpu.product: NVIDIA-L4`) and `h100`
(`cloud.example.com/gpu: h100`) in one queue, a RayCluster whose pods asked for
`cloud.example.com/gpu: h100` was admitted on `l4` and stayed Pending: since v0.18.2 Kueue matches
a pod's nodeSelector only on the keys of the flavor it tries. The model of Kueue here
(tests/support/kueue_admission.py) follows that rule; the portal's pods select one key every
flavor carries with its own value, so they are admitted on their flavor or wait.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import celpy
import pytest

from quotas import flavors
from quotas.forms import FlavorForm
from quotas.kueue import sync_kueue
from quotas.models import GpuFlavor
from runtime import k8s
from runtime.manifests import kueue as kueue_manifests
from runtime.manifests.common import LABEL_FLAVOR
from runtime.manifests.kserve import render_inferenceservice
from runtime.manifests.kueue import resource_flavor_update_problem
from runtime.manifests.rayservice import render_rayservice
from runtime.spec import DeploymentSpec, FlavorQuotaSpec, FlavorSpec, PlatformSpec, TenantQueueSpec, Toleration
from tests.support.crd import assert_valid
from tests.support.kueue_admission import GPU, admit

# The two flavors of the report; "h100" sorts first, so the queue lists it before "l4".
H100 = FlavorSpec(
    name="h100",
    gpu_model="H100",
    accelerator_type="H100",
    gpu_memory_gib=80,
    gpus_per_node=8,
    node_labels=(("cloud.example.com/gpu", "h100"),),
)
L4 = FlavorSpec(
    name="l4",
    gpu_model="L4",
    accelerator_type="L4",
    gpu_memory_gib=24,
    gpus_per_node=8,
    node_labels=(("nvidia.com/gpu.product", "NVIDIA-L4"),),
)
PLATFORM = PlatformSpec()
H100_SXM = replace(
    H100,
    name="h100-sxm",
    tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists"), Toleration(key="dedicated", value="inference")),
)


def queue(*quotas: tuple[FlavorSpec, int]) -> TenantQueueSpec:
    return TenantQueueSpec(
        tenant_slug="acme",
        namespace="acme",
        cluster_queue="tenant-acme",
        local_queue="acme",
        cohort="",
        quotas=tuple(FlavorQuotaSpec(flavor=f, nominal_gpus=n) for f, n in quotas),
    )


def cluster_objects(spec: TenantQueueSpec) -> tuple[dict, list[dict]]:
    """The ClusterQueue and every ResourceFlavor the Kueue sync applies for `spec`."""
    flavors_ = [kueue_manifests.render_resource_flavor(q.flavor) for q in spec.quotas]
    flavors_.append(kueue_manifests.render_cpu_resource_flavor(PLATFORM))
    return kueue_manifests.render_cluster_queue(spec, PLATFORM), flavors_


def deployment(flavor: FlavorSpec, backend: str = "kuberay") -> dict:
    spec = DeploymentSpec(
        deployment_id=1,
        name="chat",
        namespace="acme",
        tenant_slug="acme",
        queue_name="acme",
        model_source="org/model",
        served_model_name="chat",
        flavor=flavor,
        backend=backend,
    )
    render = render_inferenceservice if backend == "kserve" else render_rayservice
    return render(spec, PLATFORM)


def own_labels_only(resource_flavor: dict) -> dict:
    """A ResourceFlavor as the portal rendered it before the portal label (its own labels only)."""
    old = copy.deepcopy(resource_flavor)
    old["spec"]["nodeLabels"].pop(LABEL_FLAVOR)
    if not old["spec"]["nodeLabels"]:
        del old["spec"]["nodeLabels"]
    return old


def selecting(workload: dict, selector: dict[str, str]) -> dict:
    """`workload` with every pod selecting `selector` (how the portal pinned pods before)."""
    changed = copy.deepcopy(workload)
    cluster = changed["spec"]["rayClusterConfig"]
    for pod in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        pod["template"]["spec"]["nodeSelector"] = dict(selector)
    return changed


def gpu_flavor(assignment: dict | None) -> set[str] | None:
    return None if assignment is None else {by[GPU] for by in assignment.values() if GPU in by}


class TestKueueMatchesOnlyTheKeysOfTheFlavorItTries:
    def test_the_reported_case_a_pod_asking_h100_is_admitted_on_l4(self):
        # The flavors as they were (own labels only), h100 full: Kueue >= 0.18.2 ignores the
        # pod's `cloud.example.com/gpu` on l4, which has no such key, and charges it there.
        cq, rendered = cluster_objects(queue((H100, 8), (L4, 8)))
        old_flavors = [own_labels_only(f) for f in rendered]
        pod = selecting(deployment(H100), {"cloud.example.com/gpu": "h100"})
        assert gpu_flavor(admit(cq, old_flavors, pod)) == {"h100"}
        assert gpu_flavor(admit(cq, old_flavors, pod, usage={("h100", GPU): 8})) == {"l4"}

    def test_flavors_whose_labels_nest_charge_the_narrower_pod_to_the_wider_flavor(self):
        # "Nested" flavors: one's labels are a subset of the other's. A pod selecting the
        # larger set still fits the smaller flavor on the keys that flavor has.
        wide = replace(H100, name="a-h100", node_labels=(("cloud.example.com/gpu", "h100"),))
        narrow = replace(H100, name="b-h100-zone-a", node_labels=(("cloud.example.com/gpu", "h100"), ("zone", "a")))
        cq, rendered = cluster_objects(queue((wide, 8), (narrow, 8)))
        pod = selecting(deployment(narrow), dict(narrow.node_labels))
        assert gpu_flavor(admit(cq, [own_labels_only(f) for f in rendered], pod)) == {"a-h100"}
        # The portal's own rendering pins it by llm-portal.io/flavor instead.
        assert gpu_flavor(admit(cq, rendered, deployment(narrow))) == {"b-h100-zone-a"}

    def test_the_portal_pods_ask_no_such_selector(self):
        for backend in ("kuberay", "kserve"):
            workload = deployment(H100, backend)
            spec = workload["spec"]
            pods = (
                [spec["rayClusterConfig"]["headGroupSpec"], *spec["rayClusterConfig"]["workerGroupSpecs"]]
                if backend == "kuberay"
                else [{"template": {"spec": spec["predictor"]}}]
            )
            for pod in pods:
                assert set(pod["template"]["spec"]["nodeSelector"]) == {LABEL_FLAVOR}

    @pytest.mark.parametrize("backend", ["kuberay", "kserve"])
    def test_the_portal_rayservice_is_admitted_on_its_flavor_or_waits(self, backend):
        cq, rendered = cluster_objects(queue((H100, 8), (L4, 8)))
        for resource_flavor in rendered:
            assert_valid(resource_flavor)
        assert gpu_flavor(admit(cq, rendered, deployment(H100, backend))) == {"h100"}
        assert gpu_flavor(admit(cq, rendered, deployment(L4, backend))) == {"l4"}  # though h100 has room
        assert admit(cq, rendered, deployment(H100, backend), usage={("h100", GPU): 8}) is None
        assert admit(cq, rendered, deployment(L4, backend), usage={("l4", GPU): 8}) is None

    def test_the_head_is_pinned_to_the_cpu_flavor_even_when_a_gpu_flavor_has_cpu_to_spare(self):
        cq, rendered = cluster_objects(queue((H100, 8), (L4, 8)))
        assert admit(cq, rendered, deployment(H100))["head"] == {"cpu": "portal-cpu", "memory": "portal-cpu"}
        # With the CPU flavor full the head waits; it is not charged to (nor placed on) l4's nodes.
        full = {("portal-cpu", "cpu"): 10**6, ("portal-cpu", "memory"): 2**60}
        assert admit(cq, rendered, deployment(H100), usage=full) is None
        # As before: an unlabelled CPU flavor and a head that selects nothing spill onto l4.
        old = [own_labels_only(f) for f in rendered]
        assert admit(cq, old, selecting(deployment(H100), {}), usage=full)["head"]["cpu"] == "h100"


# ---------------------------------------------------------------------------------------------
# The flavor form and API refuse node labels the portal cannot render
# ---------------------------------------------------------------------------------------------

FORM = {
    "name": "l40s",
    "gpu_model": "L40S",
    "accelerator_type": "L40S",
    "gpu_memory_gib": 48,
    "gpus_per_node": 8,
    "cpu_per_gpu": 8,
    "memory_gib_per_gpu": 64,
    "tolerations": "",
    "active": "on",
}
API = {"name": "l40s", "gpu_model": "L40S", "accelerator_type": "L40S", "gpu_memory_gib": 48, "gpus_per_node": 8}
EIGHT = {f"example.com/label-{i}": "x" for i in range(8)}


class TestFlavorLabelRefusals:
    @pytest.mark.parametrize(
        ("labels", "message"),
        [
            ({"nvidia.com": {"gpu.product": "H100"}}, "nested values are not node labels"),
            ({"cloud.example.com/gpu": ["h100"]}, "nested values are not node labels"),
            ({"cloud.example.com/gpu": 100}, "the value must be text"),
            ({"cloud.example.com/gpu/h100": "x"}, "is not a label key"),
            ({"Bad Key": "x"}, "is not a label key"),
            ({LABEL_FLAVOR: "h100-sxm5"}, "is in the portal's label domain"),
            ({"node-role.llm-portal.io/gpu": "x"}, "is in the portal's label domain"),
            ({"k": "bad value"}, "is not a label value"),
            (EIGHT, "At most 7 node labels"),
            (["cloud.example.com/gpu=h100"], "must be an object"),
        ],
    )
    def test_the_api_answers_400_on_the_field_and_writes_nothing(self, world, labels, message):
        admin = world.client("platform_admin")
        response = admin.post("/api/v1/flavors/", {**API, "node_labels": labels}, format="json")
        assert response.status_code == 400, response.content
        assert list(response.json()) == ["node_labels"]
        assert any(message in m for m in response.json()["node_labels"]), response.json()
        assert not GpuFlavor.objects.filter(name="l40s").exists()
        before = list(GpuFlavor.objects.filter(name="a100-pcie").values())
        response = admin.patch("/api/v1/flavors/a100-pcie/", {"node_labels": labels}, format="json")
        assert response.status_code == 400 and "node_labels" in response.json()
        assert list(GpuFlavor.objects.filter(name="a100-pcie").values()) == before

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("cloud.example.com/gpu/h100=x", "is not a label key"),
            (f"{LABEL_FLAVOR}=h100-sxm5", "is in the portal&#x27;s label domain"),
            ("zone=a\nzone=b", "Line 2: &#x27;zone&#x27; is given twice"),
            ("zone=a=b", "is not a label value"),
            ("\n".join(f"{k}={v}" for k, v in EIGHT.items()), "At most 7 node labels"),
        ],
    )
    def test_the_form_shows_a_field_error_and_saves_nothing(self, world, text, message):
        response = world.browser("platform_admin").post("/platform/flavors/new/", {**FORM, "node_labels": text})
        assert response.status_code == 200
        assert message in response.content.decode()
        assert not GpuFlavor.objects.filter(name="l40s").exists()
        form = FlavorForm({**FORM, "node_labels": text})
        assert not form.is_valid() and list(form.errors) == ["node_labels"]

    def test_seven_labels_of_its_own_are_accepted(self, world):
        seven = dict(list(EIGHT.items())[:7])
        response = world.client("platform_admin").post("/api/v1/flavors/", {**API, "node_labels": seven}, format="json")
        assert response.status_code == 201, response.content
        rendered = kueue_manifests.render_resource_flavor(flavor_spec_of("l40s"))
        assert rendered["spec"]["nodeLabels"] == {**seven, LABEL_FLAVOR: "l40s"}
        assert_valid(rendered)  # 8 labels: the CRD's maxProperties


def flavor_spec_of(name: str) -> FlavorSpec:
    from quotas.specs import flavor_spec

    return flavor_spec(GpuFlavor.objects.get(name=name))


# ---------------------------------------------------------------------------------------------
# A flavor with a topology: Kueue 0.19.2 keeps its ResourceFlavor's nodeLabels and tolerations
# ---------------------------------------------------------------------------------------------

TOPOLOGY = ["cloud.example.com/block", "kubernetes.io/hostname"]


def with_topology(world) -> GpuFlavor:
    GpuFlavor.objects.filter(pk=world.h100.pk).update(topology_levels=TOPOLOGY)
    return GpuFlavor.objects.get(pk=world.h100.pk)


def resource_flavor_writes(cluster_api, name: str) -> list[tuple[str, str]]:
    return [
        (method, path)
        for method, path in cluster_api.requests()
        if method in ("POST", "PUT", "PATCH", "DELETE") and path.endswith(f"/resourceflavors/{name}")
    ]


class TestTopologyFlavors:
    def test_an_edit_of_its_node_labels_or_tolerations_is_a_field_error(self, world):
        with_topology(world)
        admin = world.client("platform_admin")
        for field, value in (
            ("node_labels", {"node.kubernetes.io/instance-type": "p5e.48xlarge"}),
            ("tolerations", []),
        ):
            response = admin.patch("/api/v1/flavors/h100-sxm5/", {field: value}, format="json")
            assert response.status_code == 400, response.content
            assert "keeps its" in response.json()[field][0]
        # The same values written another way are no change, and other fields may change.
        same = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        body = {"tolerations": same, "price_per_gpu_hour": "4.10"}
        assert admin.patch("/api/v1/flavors/h100-sxm5/", body, format="json").status_code == 200

    def test_a_flavor_without_topology_may_change_its_labels(self, world):
        body = {"node_labels": {"node.kubernetes.io/instance-type": "p5e.48xlarge"}}
        response = world.client("platform_admin").patch("/api/v1/flavors/h100-sxm5/", body, format="json")
        assert response.status_code == 200, response.content

    def test_the_sync_sends_no_patch_kueue_would_refuse_and_says_why_on_the_flavor(self, world, cluster_api):
        flavor = with_topology(world)
        # As the portal applied it before the portal label: own labels only, with its topology.
        stale = own_labels_only(kueue_manifests.render_resource_flavor(flavor_spec_of(flavor.name)))
        cluster_api.put(k8s.RESOURCEFLAVOR, stale)
        assert sync_kueue() > 0  # the rest converges: queues, the other flavors
        assert resource_flavor_writes(cluster_api, "h100-sxm5") == []
        assert cluster_api.get_object(k8s.RESOURCEFLAVOR, "h100-sxm5")["spec"] == stale["spec"]
        problem = GpuFlavor.objects.get(pk=flavor.pk).kueue_problem
        assert "topologyName h100-sxm5" in problem and "nodeLabels" in problem and "kubectl delete" in problem
        assert cluster_api.get_object(k8s.RESOURCEFLAVOR, "a100-pcie")["spec"]["nodeLabels"] == {
            LABEL_FLAVOR: "a100-pcie"
        }
        # Shown where the admin looks: the flavor page and the flavor API.
        page = world.browser("platform_admin").get("/platform/flavors/h100-sxm5/").content.decode()
        assert 'id="kueue-problem"' in page and "kubectl delete resourceflavor h100-sxm5" in page
        assert world.client("viewer").get("/api/v1/flavors/h100-sxm5/").json()["kueue_problem"] == problem
        # Once the admin deleted it (no workload left on it), the next sync recreates and clears.
        cluster_api.delete_object(k8s.RESOURCEFLAVOR, "h100-sxm5")
        sync_kueue()
        recreated = cluster_api.get_object(k8s.RESOURCEFLAVOR, "h100-sxm5")
        assert recreated["spec"]["nodeLabels"][LABEL_FLAVOR] == "h100-sxm5"
        assert recreated["spec"]["topologyName"] == "h100-sxm5"
        assert GpuFlavor.objects.get(pk=flavor.pk).kueue_problem == ""

    def test_a_flavor_without_topology_gets_the_portal_label_on_the_next_sync(self, world, cluster_api):
        stale = own_labels_only(kueue_manifests.render_resource_flavor(flavor_spec_of("h100-sxm5")))
        cluster_api.put(k8s.RESOURCEFLAVOR, stale)
        sync_kueue()
        labels = cluster_api.get_object(k8s.RESOURCEFLAVOR, "h100-sxm5")["spec"]["nodeLabels"]
        assert labels == {"node.kubernetes.io/instance-type": "p5.48xlarge", LABEL_FLAVOR: "h100-sxm5"}
        assert GpuFlavor.objects.get(name="h100-sxm5").kueue_problem == ""


class TestNoDataMigration:
    def test_the_portal_label_is_added_at_render_time_not_stored(self, world):
        # No data migration: the rows keep their own labels only.
        assert GpuFlavor.objects.get(name="h100-sxm5").node_labels == {
            "node.kubernetes.io/instance-type": "p5.48xlarge"
        }
        flavors.flavor_save(actor=world.users["platform_admin"], name="a100-pcie", values={"gpu_model": "A100 80GB"})
        assert GpuFlavor.objects.get(name="a100-pcie").node_labels == {}


# The ResourceFlavor CEL rules of the Kueue the portal runs on (kubernetes-sigs/kueue v0.19.2,
# apis/kueue/v1beta2/resourceflavor_types.go). The CRD file in ../shared is from a later, unreleased
# Kueue that dropped both (kueue#13622, kueue#13738), and crd.py skips transition rules, so they
# run here.
KUEUE_0_19_2_TOPOLOGY_RULES = (
    "!has(oldSelf.topologyName) || (has(self.nodeLabels) == has(oldSelf.nodeLabels) && "
    "(!has(self.nodeLabels) || self.nodeLabels == oldSelf.nodeLabels))",
    "!has(oldSelf.topologyName) || (has(self.tolerations) == has(oldSelf.tolerations) && "
    "(!has(self.tolerations) || self.tolerations == oldSelf.tolerations))",
)


def kueue_accepts_update(old: dict, new: dict) -> bool:
    env = celpy.Environment()
    bound = {"self": celpy.json_to_cel(new["spec"]), "oldSelf": celpy.json_to_cel(old["spec"])}
    return all(bool(env.program(env.compile(rule)).evaluate(bound)) for rule in KUEUE_0_19_2_TOPOLOGY_RULES)


class TestResourceFlavorUpdates:
    H100_TAS = replace(H100_SXM, topology_levels=("cloud.example.com/block", "kubernetes.io/hostname"))

    def cases(self) -> list[tuple[str, dict, dict]]:
        wanted = kueue_manifests.render_resource_flavor(self.H100_TAS)
        before_label = copy.deepcopy(wanted)
        del before_label["spec"]["nodeLabels"][LABEL_FLAVOR]
        other_toleration = copy.deepcopy(wanted)
        other_toleration["spec"]["tolerations"] = other_toleration["spec"]["tolerations"][:1]
        no_topology = copy.deepcopy(before_label)
        del no_topology["spec"]["topologyName"]
        return [
            ("in sync", wanted, wanted),
            ("portal label added to a topology flavor", before_label, wanted),
            ("tolerations changed on a topology flavor", other_toleration, wanted),
            (
                "portal label added to a flavor without topology",
                no_topology,
                kueue_manifests.render_resource_flavor(H100_SXM),
            ),
        ]

    def test_the_sync_refrains_exactly_when_kueue_would_refuse(self) -> None:
        for case, current, wanted in self.cases():
            problem = resource_flavor_update_problem(current, wanted)
            assert (problem == "") == kueue_accepts_update(current, wanted), case
        assert resource_flavor_update_problem(None, kueue_manifests.render_resource_flavor(self.H100_TAS)) == ""

    def test_the_problem_names_the_fields_and_the_way_out(self) -> None:
        _, current, wanted = self.cases()[1]
        problem = resource_flavor_update_problem(current, wanted)
        assert problem.startswith(
            "ResourceFlavor h100-sxm has topologyName h100-sxm, and Kueue refuses changes to its nodeLabels"
        )
        assert "tolerations" not in problem.split("so the portal")[0]
        assert "kubectl delete resourceflavor h100-sxm" in problem
