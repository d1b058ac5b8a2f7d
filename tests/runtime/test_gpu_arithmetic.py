"""GPU arithmetic, asserted for every shape rather than the common ones (issue 24).

For any tensor parallel (TP) x pipeline parallel (PP) x replicas x node size x backend, five
numbers have to agree or a deployment either wastes GPUs, is never admitted, or crashes NCCL:

- the GPUs each rendered worker pod asks for (`nvidia.com/gpu`, requests == limits),
- the pods one replica spans (`rayservice.pods_per_replica`) and the worker group's bounds,
- what Ray / vLLM place (engine_kwargs in serveConfigV2, any placement group bundles),
- what the portal reserves (`ModelDeployment.gpus_needed` = max_replicas x TP x PP),
- what Kueue counts (sum over pod sets of count x per-pod GPU request, at max scale).

Node sizes include 1, 2, 3 and 6 GPUs: on 8-GPU nodes `min(TP x PP, 8)` hides a wrong product
for most shapes. A shape the renderer cannot place must be refused with a ValueError naming
the numbers, never rendered half-consistent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deployments.models import ModelDeployment
from runtime.manifests import kserve, rayservice
from runtime.manifests.common import GPU_RESOURCE
from runtime.spec import DeploymentSpec, RenderError
from tests.runtime.test_manifests import L4, PLATFORM, small_spec

# The replica arithmetic of autoscaling deployments: KServe's Knative mode keeps min..max pods;
# its Standard mode (the default) runs min == max and refuses the rest (test_kserve_standard.py).
KSERVE_PLATFORM = replace(PLATFORM, kserve_deployment_mode="Knative")

NODE_SIZES = (1, 2, 3, 4, 6, 8)
BACKENDS = ("kuberay", "kserve")

# ~1 ms per render; 1000 shapes keep the whole module at a few seconds.
PROPERTY = settings(
    derandomize=True,
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# ---------------------------------------------------------------------------------------------
# Strategy
# ---------------------------------------------------------------------------------------------


@st.composite
def shapes(draw: st.DrawFn, backends: tuple[str, ...] = BACKENDS) -> DeploymentSpec:
    """A deployment spec of any parallel shape on any node size, valid replica bounds.

    TP and PP reach 8 so that TP > node, TP x PP > node, uneven splits and several pods per
    replica all occur on every node size; replicas follow the portal's limits (min 0, max >= 1,
    min <= max).
    """
    per_node = draw(st.sampled_from(NODE_SIZES))
    max_replicas = draw(st.integers(1, 4))
    return small_spec(
        flavor=replace(L4, name=f"gpu-x{per_node}", gpus_per_node=per_node),
        tensor_parallel_size=draw(st.integers(1, 8)),
        pipeline_parallel_size=draw(st.integers(1, 8)),
        min_replicas=draw(st.integers(0, max_replicas)),
        max_replicas=max_replicas,
        backend=draw(st.sampled_from(backends)),
    )


# ---------------------------------------------------------------------------------------------
# Reading the rendered objects the way Kubernetes, Kueue and Ray do
# ---------------------------------------------------------------------------------------------


def container_gpus(container: dict[str, Any]) -> int:
    """One container's GPUs; the device plugin needs requests == limits, so both must agree."""
    resources = container.get("resources") or {}
    limits = (resources.get("limits") or {}).get(GPU_RESOURCE)
    # Kubernetes defaults a missing request to the limit.
    requests = (resources.get("requests") or {}).get(GPU_RESOURCE, limits)
    assert requests == limits, f"{container['name']}: GPU requests {requests} != limits {limits}"
    return int(limits or 0)


def pod_gpus(pod_spec: dict[str, Any]) -> int:
    """A pod's effective GPU request as the scheduler and Kueue compute it."""
    regular = sum(container_gpus(c) for c in pod_spec["containers"])
    init = max((container_gpus(c) for c in pod_spec.get("initContainers") or []), default=0)
    return max(regular, init)


@dataclass(frozen=True)
class PodSet:
    """One Kueue pod set: identical pods, counted at the low and the high end of scaling."""

    name: str
    count_min: int
    count_max: int
    gpus_per_pod: int


@dataclass(frozen=True)
class Rendered:
    """What a backend's object says about GPUs, read back from the object itself."""

    pod_sets: tuple[PodSet, ...]
    gpu_pod_set: PodSet  # the (one) pod set whose pods run the model
    replicas: tuple[int, int]  # the engine's own autoscaling bounds (Serve / Knative)
    tp_pp: tuple[int, int]  # the parallelism the engine is told to use
    bundles: list[dict[str, Any]] | None  # Ray placement group bundles, when rendered

    def kueue_gpus(self, *, at_max: bool) -> int:
        return sum((p.count_max if at_max else p.count_min) * p.gpus_per_pod for p in self.pod_sets)


def read_rayservice(obj: dict[str, Any], spec: DeploymentSpec) -> Rendered:
    cluster = obj["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    pod_sets = [PodSet("head", 1, 1, pod_gpus(head["template"]["spec"]))]
    for group in cluster["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], group["groupName"]
        gpus = pod_gpus(group["template"]["spec"])
        if "num-gpus" in group.get("rayStartParams", {}):
            # Ray must advertise exactly the GPUs the pod was given.
            assert int(group["rayStartParams"]["num-gpus"]) == gpus
        # Kueue admits the group at `replicas`; the autoscaler may grow it to `maxReplicas`.
        pod_sets.append(PodSet(group["groupName"], group["replicas"], group["maxReplicas"], gpus))
    gpu_sets = [p for p in pod_sets if p.gpus_per_pod]
    assert len(gpu_sets) == 1, f"expected one GPU worker group, got {gpu_sets}"

    serve = yaml.safe_load(obj["spec"]["serveConfigV2"])
    (app,) = serve["applications"]
    (llm,) = app["args"]["llm_configs"]
    assert llm == rayservice.llm_config(spec), "serveConfigV2 must carry the shared llm_config"
    autoscaling = llm["deployment_config"]["autoscaling_config"]
    kwargs = llm["engine_kwargs"]
    placement = llm.get("placement_group_config")
    return Rendered(
        pod_sets=tuple(pod_sets),
        gpu_pod_set=gpu_sets[0],
        replicas=(autoscaling["min_replicas"], autoscaling["max_replicas"]),
        tp_pp=(kwargs["tensor_parallel_size"], kwargs["pipeline_parallel_size"]),
        bundles=placement["bundles"] if placement else None,
    )


def read_inferenceservice(obj: dict[str, Any]) -> Rendered:
    predictor = obj["spec"]["predictor"]
    gpus = pod_gpus(predictor)
    # Knative keeps minReplicas pods (0 = scale to zero) and grows to maxReplicas.
    pod_set = PodSet("predictor", predictor["minReplicas"], predictor["maxReplicas"], gpus)
    (container,) = predictor["containers"]
    flags = dict(arg.removeprefix("--").split("=", 1) for arg in container["args"] if "=" in arg)
    return Rendered(
        pod_sets=(pod_set,),
        gpu_pod_set=pod_set,
        replicas=(predictor["minReplicas"], predictor["maxReplicas"]),
        tp_pp=(int(flags["tensor-parallel-size"]), int(flags["pipeline-parallel-size"])),
        bundles=None,
    )


def render_object(spec: DeploymentSpec) -> dict[str, Any]:
    """The object the spec's backend would apply."""
    if spec.backend == "kuberay":
        return rayservice.render_rayservice(spec, PLATFORM)
    return kserve.render_inferenceservice(spec, KSERVE_PLATFORM)


def render(spec: DeploymentSpec) -> tuple[Rendered, int]:
    """(what the object says, the pods one replica spans by the backend's own rule)."""
    if spec.backend == "kuberay":
        obj = rayservice.render_rayservice(spec, PLATFORM)
        return read_rayservice(obj, spec), rayservice.pods_per_replica(spec)
    obj = kserve.render_inferenceservice(spec, KSERVE_PLATFORM)
    # The kserve backend runs each replica as exactly one predictor pod.
    return read_inferenceservice(obj), 1


def reserved_gpus(spec: DeploymentSpec) -> int:
    """What the portal reserves in quota, by the model's own formula on an unsaved row."""
    row = ModelDeployment(
        tensor_parallel_size=spec.tensor_parallel_size,
        pipeline_parallel_size=spec.pipeline_parallel_size,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
    )
    return row.gpus_needed


def must_render(spec: DeploymentSpec) -> bool:
    """Shapes every backend can place and so must not refuse: whole TP groups fill a node (the
    portal's one placement rule, runtime.manifests.common.placement_error, asks that TP divide a
    node's GPUs even for a one-pod replica), and one pod holds the replica or (kuberay) whole
    nodes hold it."""
    tp, gpus, per_node = spec.tensor_parallel_size, spec.gpus_per_replica, spec.flavor.gpus_per_node
    if tp > per_node or per_node % tp:
        return False
    if gpus <= per_node:
        return True
    return spec.backend == "kuberay" and gpus % per_node == 0


def must_refuse(spec: DeploymentSpec) -> bool:
    """Shapes no node can hold: a TP group wider than a node or not dividing it, or a kserve
    replica (one pod) wider than a node."""
    per_node = spec.flavor.gpus_per_node
    if spec.tensor_parallel_size > per_node or per_node % spec.tensor_parallel_size:
        return True
    return spec.backend == "kserve" and spec.gpus_per_replica > per_node


def describe(spec: DeploymentSpec) -> str:
    return (
        f"{spec.backend} TP={spec.tensor_parallel_size} PP={spec.pipeline_parallel_size} "
        f"node={spec.flavor.gpus_per_node} replicas={spec.min_replicas}..{spec.max_replicas}"
    )


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------


@PROPERTY
@given(spec=shapes())
@example(spec=small_spec(flavor=replace(L4, gpus_per_node=2), tensor_parallel_size=2, pipeline_parallel_size=3))
@example(spec=small_spec(flavor=replace(L4, gpus_per_node=6), tensor_parallel_size=3, pipeline_parallel_size=4))
def test_every_shape_renders_consistent_gpus_or_is_refused_clearly(spec: DeploymentSpec) -> None:
    tp, pp = spec.tensor_parallel_size, spec.pipeline_parallel_size
    per_node = spec.flavor.gpus_per_node
    try:
        rendered, pods = render(spec)
    except ValueError as refusal:
        message = str(refusal)
        assert not must_render(spec), f"{describe(spec)} fits but was refused: {message}"
        # A clear refusal names the node size it ran into and what did not fit.
        assert f"{per_node}" in message and "GPU" in message, message
        assert "tensor_parallel_size" in message or f"{tp * pp} GPUs" in message, message
        return
    assert not must_refuse(spec), f"{describe(spec)} cannot be placed but was rendered"

    gpus = rendered.gpu_pod_set.gpus_per_pod
    # Each pod fits on one node, and a replica's pods hold exactly its TP x PP GPUs.
    assert 1 <= gpus <= per_node, describe(spec)
    assert pods * gpus == tp * pp, f"{describe(spec)}: {pods} pods x {gpus} GPUs != {tp * pp}"

    # Pod-level bounds are whole replicas: never half a replica placed, at either end.
    group = rendered.gpu_pod_set
    assert (group.count_min, group.count_max) == (spec.min_replicas * pods, spec.max_replicas * pods)
    # The engine scales the same replicas and shards them the same way.
    assert rendered.replicas == (spec.min_replicas, spec.max_replicas)
    assert rendered.tp_pp == (tp, pp)
    if rendered.bundles is not None:
        bundle_gpus = [int(b.get("GPU", 0)) for b in rendered.bundles]
        assert sum(bundle_gpus) == tp * pp, f"{describe(spec)}: bundles {rendered.bundles}"
        assert max(bundle_gpus) <= gpus, f"{describe(spec)}: a bundle larger than a pod"

    # Portal reservation == Kueue at max scale == spec arithmetic; at min scale, whole replicas.
    reserved = reserved_gpus(spec)
    assert reserved == spec.max_replicas * tp * pp
    assert rendered.kueue_gpus(at_max=True) == reserved, describe(spec)
    assert rendered.kueue_gpus(at_max=False) == spec.min_replicas * tp * pp, describe(spec)


@PROPERTY
@given(spec=shapes(backends=("kuberay",)))
@example(spec=small_spec(flavor=replace(L4, gpus_per_node=3), tensor_parallel_size=2, pipeline_parallel_size=3))
def test_every_worker_pod_holds_whole_tensor_parallel_groups(spec: DeploymentSpec) -> None:
    """TP needs NVLink, so a TP group must never span two pods: each pod's GPUs are whole
    multiples of TP (or the shape is refused)."""
    try:
        rendered, pods = render(spec)
    except ValueError:
        return
    gpus = rendered.gpu_pod_set.gpus_per_pod
    assert gpus % spec.tensor_parallel_size == 0, (
        f"{describe(spec)}: {pods} pods x {gpus} GPUs leave a TP={spec.tensor_parallel_size} group across two pods"
    )


REPLICA_BOUNDS_BUG = (
    "runtime/manifests/rayservice.py render_rayservice/_worker_group never checks the replica "
    "bounds (kserve.render_inferenceservice does): min_replicas > max_replicas or max_replicas = 0 "
    "renders workerGroup replicas=minReplicas=min*pods > maxReplicas=max*pods and a Serve "
    "autoscaling_config Ray rejects, instead of a ValueError. Minimal: TP=1 PP=1 min=1 max=0. "
    "(The portal's validation and DB constraint stop these before the renderer.)"
)


@pytest.mark.parametrize(
    "backend",
    ["kserve", "kuberay"],
)
@PROPERTY
@given(low=st.integers(0, 4), high=st.integers(0, 4))
@example(low=1, high=0)
def test_impossible_replica_bounds_are_refused_not_rendered(backend: str, low: int, high: int) -> None:
    spec = small_spec(min_replicas=low, max_replicas=high, backend=backend)
    if 1 <= high and low <= high:
        render(spec)  # renders, and reads back consistent (the arithmetic is the property above)
        return
    with pytest.raises(RenderError, match="replicas"):
        render_object(spec)
