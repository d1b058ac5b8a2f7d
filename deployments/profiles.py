"""Serving profiles: the throughput / latency / cost presets for a deployment's engine and scaling
fields. The one place the presets live; the request form, its script, the API and the advisor's
advice all read them from here.

The trade-off triangle, and what each corner fills:

* throughput: a large per-step token budget (vLLM's max_num_batched_tokens, shared by prefill
  chunks and decode tokens: bigger steps keep the GPU compute-bound), chunked prefill on, a high
  autoscaling target (Ray Serve's target_ongoing_requests: many requests per replica before it
  scales), FP8 where the GPU computes in FP8, and more replicas within the quota.
* latency: tensor parallelism inside one node (each token's work split over more GPUs), small
  prefill chunks so a long prompt never stalls the running decodes for long, a low autoscaling
  target so replicas are added before requests queue, and one replica always warm.
* cost: the fewest GPUs that fit (FP8 where the GPU computes in FP8), one replica, scale to zero
  where the backend can, the tenant's idle policy named, and spot capacity suggested where an
  allowed flavor offers it. The flavor is never switched: the suggestion is for the user.

Assumptions, stated once:
* FP8 (vLLM's online W8A8 quantization of a BF16/FP16 checkpoint) is chosen only for accelerator
  types with FP8 arithmetic: compute capability 8.9 and newer (Ada L4/L40, Hopper H100/H200/H20,
  Blackwell B100/B200) and AMD MI300-class. Ampere (A100, A10G) would run FP8 weights only as
  W8A16 and MoE models not at all, so it gets no FP8.
* AWQ / GPTQ need a checkpoint quantized that way; vLLM cannot apply them to BF16 weights. A
  model whose id names the method ("…-AWQ") gets that method in every profile, and no other.
* Scale to zero: the cluster backends can (Ray Serve min_replicas 0 with KubeRay's autoscaler;
  Knative under KServe); the local backend runs exactly one engine process.

`profile_fields` is pure (no ORM, no I/O); `room_for` reads the tenant's policy and quota.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from deployments import sizing
from deployments.choices import ServingProfile
from deployments.limits import LIMITS
from runtime.backends import names as backend_names
from runtime.backends import traits as backend_traits
from runtime.manifests.common import placement_error

# The fields a profile fills. Everything else (model, name, flavor, context length, memory
# share, dtype) is the user's alone.
PROFILE_FIELDS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "min_replicas",
    "max_replicas",
    "target_ongoing_requests",
    "enable_chunked_prefill",
    "max_num_batched_tokens",
    "quantization",
)
PROFILES = tuple(p for p in ServingProfile.values if p)
# What each profile is for, in a few words (the form's choices, the advisor's advice, docs/deployments.md).
SUMMARY = {
    ServingProfile.THROUGHPUT: "large batched-token budget, high target ongoing requests, FP8 where the GPU allows",
    ServingProfile.LATENCY: "tensor parallelism in one node, smaller prefill chunks, lower target ongoing requests",
    ServingProfile.COST: "fewest GPUs, scale to zero where the backend can, spot capacity where offered",
}
FP8_ACCELERATORS = (
    "H100",
    "H200",
    "H20",
    "H800",
    "GH200",
    "L4",
    "L40",
    "B100",
    "B200",
    "B300",
    "GB200",
    "MI300",
    "MI325",
)
PREQUANTIZED = ("awq", "gptq", "fp8")
BATCHED_TOKENS = {ServingProfile.THROUGHPUT: 16384, ServingProfile.LATENCY: 2048, ServingProfile.COST: None}
TARGET_ONGOING = {ServingProfile.THROUGHPUT: 64, ServingProfile.LATENCY: 8, ServingProfile.COST: 32}
MAX_REPLICAS = {ServingProfile.THROUGHPUT: 4, ServingProfile.LATENCY: 2, ServingProfile.COST: 1}


class UnknownProfile(ValueError):
    """A profile name that is not one of PROFILES."""


@dataclass(frozen=True)
class Room:
    """What the tenant's policy and quota leave for this deployment (room_for builds it)."""

    gpus: int | None = None  # GPUs it may reserve within nominal quota and policy; None: no limit known
    idle_stop_hours: int = 0  # the tenant's idle policy (0: off)
    spot_flavors: tuple[str, ...] = ()  # allowed, active flavors that offer spot capacity


@dataclass(frozen=True)
class Preset:
    """A profile's values for one draft, with a one-line reason per field and notes for the user."""

    profile: str
    values: dict[str, Any]
    reasons: dict[str, str]
    notes: tuple[str, ...] = ()
    fits: bool = True  # False: no shape of this flavor holds the model's weights and KV cache
    suggested_flavor: str | None = None

    def as_dict(self) -> dict:
        return {
            "profile": self.profile,
            "label": ServingProfile(self.profile).label,
            "summary": SUMMARY[ServingProfile(self.profile)],
            "fields": {name: {"value": self.values[name], "reason": self.reasons[name]} for name in PROFILE_FIELDS},
            "notes": list(self.notes),
            "fits": self.fits,
            "suggested_flavor": self.suggested_flavor,
        }


@dataclass(frozen=True)
class _Shape:
    tp: int
    pp: int
    verdict: str  # sizing verdict, or "unsized" where the memory check does not apply

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


def fp8_capable(accelerator_type: str) -> bool:
    """Whether the accelerator computes in FP8 (see the module docstring's assumption)."""
    return accelerator_type.strip().upper().startswith(FP8_ACCELERATORS)


def scales_to_zero(backend: str) -> bool:
    """Whether a backend can run no replica while idle: the cluster ones can (Ray Serve
    min_replicas 0 under KubeRay's autoscaler; Knative under KServe), the local one cannot (it
    runs exactly one engine process)."""
    return backend not in backend_names() or backend_traits(backend).on_cluster


def offers_spot(flavor) -> bool:
    """Whether the flavor's node provisioning offers spot capacity (quotas.GpuFlavor.provisioning,
    key `capacity_types`, e.g. ["spot", "on-demand"])."""
    provisioning = getattr(flavor, "provisioning", None)
    capacity = provisioning.get("capacity_types") if isinstance(provisioning, dict) else None
    return isinstance(capacity, list) and "spot" in capacity


def prequantized(model_source: str) -> str:
    """The quantization a checkpoint's id names ("…-AWQ" → "awq"), or ""."""
    lowered = model_source.lower()
    return next((method for method in PREQUANTIZED if method in lowered.replace("_", "-").split("/")[-1]), "")


def _quantization(profile: str, model_source: str, accelerator_type: str) -> tuple[str, str]:
    method = prequantized(model_source)
    if method:
        return method, f"The checkpoint is {method.upper()}-quantized; vLLM must load it that way."
    if profile == ServingProfile.LATENCY:
        return "", "Full precision: this profile buys speed with tensor parallelism, not with lower precision."
    if fp8_capable(accelerator_type):
        gain = "more throughput" if profile == ServingProfile.THROUGHPUT else "half the weight memory, fewer GPUs"
        return "fp8", f"{accelerator_type} computes in FP8: {gain}, little accuracy lost."
    if accelerator_type:
        return "", f"{accelerator_type} has no FP8 arithmetic and the checkpoint is not AWQ/GPTQ: no quantization."
    return "", "No GPU type named for this flavor: no quantization."


def _shapes(gpus_per_node: int, whole_node_pods: bool):
    """(TP, PP) candidates in order of GPUs per replica: TP groups inside one node first, then
    whole nodes as pipeline stages where the backend splits a replica across nodes."""
    for tp in (d for d in range(1, gpus_per_node + 1) if gpus_per_node % d == 0):
        yield tp, 1
    if whole_node_pods:
        for nodes in range(2, LIMITS["pipeline_parallel_size"].high + 1):
            if gpus_per_node * nodes > LIMITS["tensor_parallel_size"].high * LIMITS["pipeline_parallel_size"].high:
                break
            yield gpus_per_node, nodes


def _smallest_fit(draft: dict, flavor, quantization: str, sized: bool, whole_node_pods: bool) -> _Shape | None:
    """The shape with the fewest GPUs that fits with headroom (else the fewest that fits at all);
    None when nothing does. Unsized backends and unknown models take one GPU."""
    if not sized:
        return _Shape(1, 1, "unsized")
    thin = None
    for tp, pp in _shapes(flavor.gpus_per_node, whole_node_pods):
        if placement_error(
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            gpus_per_node=flavor.gpus_per_node,
            flavor=flavor.name,
            whole_node_pods=whole_node_pods,
        ):
            continue
        fit = sizing.estimate(
            model_source=draft.get("model_source") or "",
            parameter_count_b=draft.get("parameter_count_b"),
            dtype=draft.get("dtype") or "auto",
            quantization=quantization,
            tensor_parallel_size=tp,
            pipeline_parallel_size=pp,
            max_model_len=draft.get("max_model_len"),
            gpu_memory_gib=flavor.gpu_memory_gib,
            gpu_memory_utilization=draft.get("gpu_memory_utilization") or 0.9,
            kv_cache_dtype=draft.get("kv_cache_dtype") or "auto",
        )
        if fit.verdict in ("fits", "unknown"):
            return _Shape(tp, pp, fit.verdict)
        if fit.verdict == "thin" and thin is None:
            thin = _Shape(tp, pp, "thin")
    return thin


def _latency_tp(shape: _Shape, gpus_per_node: int, room: Room, sized: bool) -> int:
    """Twice the smallest fitting TP (the next TP that divides the node), where one node and the
    room hold it; multi-node replicas keep their shape."""
    if not sized or shape.pp > 1 or shape.verdict == "unknown":
        return shape.tp
    wider = next((d for d in range(2 * shape.tp, gpus_per_node + 1) if gpus_per_node % d == 0), None)
    if wider is None or (room.gpus is not None and wider > room.gpus):
        return shape.tp
    return wider


def _shape_reason(shape: _Shape, tp: int, flavor) -> tuple[str, str]:
    if shape.verdict == "unsized":
        return "One engine process: this backend runs on the host's CPUs.", "One stage."
    if shape.verdict == "unknown":
        return "Model size unknown: one GPU (give the parameter count for a sized shape).", "One stage."
    gpus = shape.gpus
    if tp != shape.tp:
        tp_reason = f"{tp} GPUs of one {flavor.name} node per token step (the model fits on {shape.tp}): lower latency."
    else:
        tp_reason = f"The fewest GPUs ({gpus}) that hold the weights and one full-length sequence's KV cache."
    pp_reason = (
        f"{shape.pp} whole {flavor.gpus_per_node}-GPU nodes as pipeline stages: the model is larger than one node."
        if shape.pp > 1
        else "One node: no pipeline stages."
    )
    return tp_reason, pp_reason


def _replicas(profile: str, per_replica: int, room: Room, scale_to_zero: bool, on_cluster: bool) -> dict:
    """min/max replicas and their reasons."""
    if not on_cluster:
        one = "The local backend serves one replica."
        return {"min_replicas": (1, one), "max_replicas": (1, one)}
    cap = MAX_REPLICAS[ServingProfile(profile)]
    if room.gpus is not None:
        cap = max(1, min(cap, room.gpus // per_replica))
    where = "within your free quota and policy" if room.gpus is not None else "the profile's ceiling"
    if profile == ServingProfile.COST:
        low = (
            (
                0,
                "Scale to zero when idle: no GPUs run while nobody calls (the first request waits for a cold start).",
            )
            if scale_to_zero
            else (1, "This backend cannot scale to zero: one replica stays up.")
        )
        return {"min_replicas": low, "max_replicas": (1, "One replica: the fewest GPUs reserved.")}
    if profile == ServingProfile.LATENCY:
        return {
            "min_replicas": (1, "One replica always warm: no cold start in front of a request."),
            "max_replicas": (cap, f"Room to scale out before requests queue ({where})."),
        }
    return {
        "min_replicas": (1, "One replica always up; the autoscaler adds the rest under load."),
        "max_replicas": (cap, f"More replicas for more requests per second ({where})."),
    }


def _notes(profile: str, flavor, room: Room, scale_to_zero: bool) -> tuple[tuple[str, ...], str | None]:
    if profile != ServingProfile.COST:
        return (), None
    notes = []
    if room.idle_stop_hours:
        notes.append(f"Your team's idle policy stops a deployment after {room.idle_stop_hours} h without requests.")
    else:
        notes.append("Your team has no idle policy: stop the deployment yourself when it is not needed.")
    if not scale_to_zero:
        notes.append("This backend keeps one replica running: stop it when idle to free the GPUs.")
    suggested = None
    if offers_spot(flavor):
        notes.append(f"{flavor.name} offers spot capacity: cheaper GPUs that the provider may take back.")
    elif others := [name for name in room.spot_flavors if name != flavor.name]:
        suggested = others[0]
        notes.append(
            f"Spot capacity is offered on {', '.join(others)}: cheaper, but the provider may take the GPUs back. "
            "Choose that hardware yourself if the trade suits you."
        )
    return tuple(notes), suggested


def profile_fields(profile: str, *, draft: dict, flavor, backend: str, room: Room) -> Preset:
    """The values `profile` gives the PROFILE_FIELDS of `draft` (model_source, parameter_count_b,
    max_model_len, dtype, gpu_memory_utilization are read) on `flavor` with `backend`, with a
    one-line reason per field. Raises UnknownProfile for a name not in PROFILES."""
    if profile not in PROFILES:
        raise UnknownProfile(f"Unknown serving profile {profile!r}: choose one of {', '.join(PROFILES)}.")
    known = backend in backend_names()
    sized = not known or backend_traits(backend).sized_for_gpus
    whole_node_pods = known and backend_traits(backend).whole_node_pods
    on_cluster = not known or backend_traits(backend).on_cluster
    scale_to_zero = scales_to_zero(backend)
    model = draft.get("model_source") or ""
    quantization, quant_reason = _quantization(profile, model, flavor.accelerator_type if sized else "")
    shape = _smallest_fit(draft, flavor, quantization, sized, whole_node_pods)
    if (
        shape is None
        and not quantization
        and sized
        and fp8_capable(flavor.accelerator_type)
        and not prequantized(model)
    ):
        # Full precision holds nowhere on this hardware: FP8 is the way it fits at all.
        quantization, quant_reason = "fp8", f"Only FP8 fits this model on {flavor.name} ({flavor.accelerator_type})."
        shape = _smallest_fit(draft, flavor, quantization, sized, whole_node_pods)
    fits = shape is not None
    if shape is None:  # nothing holds it: the largest single-node shape, and check_draft says why
        shape = _Shape(flavor.gpus_per_node, 1, "does_not_fit")
    tp = _latency_tp(shape, flavor.gpus_per_node, room, sized) if profile == ServingProfile.LATENCY else shape.tp
    tp_reason, pp_reason = _shape_reason(shape, tp, flavor)
    if not fits:
        tp_reason = f"No shape of {flavor.name} holds this model; choose larger GPUs or a quantized checkpoint."
    chosen: dict[str, tuple[Any, str]] = {
        "tensor_parallel_size": (tp, tp_reason),
        "pipeline_parallel_size": (shape.pp, pp_reason),
        **_replicas(profile, tp * shape.pp, room, scale_to_zero, on_cluster),
        "target_ongoing_requests": (TARGET_ONGOING[ServingProfile(profile)], _target_reason(profile)),
        "enable_chunked_prefill": (True, _chunk_reason(profile)),
        "max_num_batched_tokens": (BATCHED_TOKENS[ServingProfile(profile)], _budget_reason(profile)),
        "quantization": (quantization, quant_reason),
    }
    notes, suggested = _notes(profile, flavor, room, scale_to_zero)
    return Preset(
        profile=profile,
        values={name: value for name, (value, _) in chosen.items()},
        reasons={name: reason for name, (_, reason) in chosen.items()},
        notes=notes,
        fits=fits,
        suggested_flavor=suggested,
    )


def _target_reason(profile: str) -> str:
    return {
        ServingProfile.THROUGHPUT: "Many requests per replica before scaling out: large batches keep the GPUs busy.",
        ServingProfile.LATENCY: "Few requests per replica: the autoscaler adds replicas before requests queue.",
        ServingProfile.COST: "Packs requests onto few replicas; the rest wait a little rather than cost a GPU.",
    }[ServingProfile(profile)]


def _chunk_reason(profile: str) -> str:
    if profile == ServingProfile.LATENCY:
        return "Long prompts are split so running requests keep streaming tokens."
    return "Prefill chunks ride along with decode steps: the GPU does both at once."


def _budget_reason(profile: str) -> str:
    return {
        ServingProfile.THROUGHPUT: "A large token budget per step: big prefill chunks, the GPU stays compute-bound.",
        ServingProfile.LATENCY: "Small prefill chunks: a long prompt never holds up the decode steps for long.",
        ServingProfile.COST: "vLLM's own default budget.",
    }[ServingProfile(profile)]


@dataclass
class Applied:
    """A draft after a profile filled it: which fields came from the profile and which of the
    fields the caller set differ from the profile's values (kept: what the caller sent wins)."""

    data: dict
    preset: Preset | None
    filled: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)


def apply_profile(data: dict, *, sent, base: dict | None = None, tenant=None, credit_gpus: int = 0) -> Applied:
    """Fill the PROFILE_FIELDS the caller did not send (`sent`: the names it did) from
    `data["serving_profile"]`, over `base` (an existing deployment's spec, for a change).
    Nothing happens without a profile, or without a flavor to size for."""
    profile = data.get("serving_profile") or ""
    draft = {**(base or {}), **data}
    flavor = draft.get("flavor")
    if not profile or flavor is None:
        return Applied(data=dict(data), preset=None)
    backend = draft.get("backend") or settings.RUNTIME_DEFAULT_BACKEND
    preset = profile_fields(
        profile, draft=draft, flavor=flavor, backend=backend, room=room_for(tenant, flavor, credit_gpus)
    )
    filled = [name for name in PROFILE_FIELDS if name not in sent]
    overrides = [name for name in PROFILE_FIELDS if name in sent and data.get(name) != preset.values[name]]
    return Applied(
        data={**data, **{name: preset.values[name] for name in filled}},
        preset=preset,
        filled=filled,
        overrides=overrides,
    )


def room_for(tenant, flavor, credit_gpus: int = 0) -> Room:
    """The tenant's room for one deployment of `flavor`: free nominal quota (plus `credit_gpus`
    it already holds) capped by the policy's per-deployment ceiling, its idle policy, and the
    allowed flavors that offer spot capacity. No tenant: no limit known."""
    if tenant is None:
        return Room()
    from quotas.models import GpuFlavor
    from quotas.policy import allowed_flavor_ids
    from quotas.services import quota_preview

    free = quota_preview(tenant=tenant, flavor=flavor, gpus=0, credit_gpus=credit_gpus).free_nominal
    limit = tenant.max_gpus_per_deployment
    allowed = allowed_flavor_ids(tenant)
    flavors = GpuFlavor.objects.filter(active=True).order_by("name")
    if allowed is not None:
        flavors = flavors.filter(pk__in=allowed)
    spot = tuple(f.name for f in flavors if offers_spot(f))
    return Room(gpus=min(free, limit) if limit else free, idle_stop_hours=tenant.idle_stop_hours, spot_flavors=spot)


def profile_note(spec: dict, *, tenant=None, credit_gpus: int = 0) -> str:
    """For the timeline: the profile a spec names and the fields it sets differently from the
    profile's values (the user's own, kept), or "" for a custom spec."""
    applied = apply_profile(spec, sent=set(PROFILE_FIELDS), tenant=tenant, credit_gpus=credit_gpus)
    if applied.preset is None:
        return ""
    label = ServingProfile(applied.preset.profile).label
    if not applied.overrides:
        return f"Serving profile: {label}."
    return f"Serving profile: {label}, with your own {', '.join(applied.overrides)}."
