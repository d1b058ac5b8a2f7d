"""Which serving profile (deployments.profiles) a piece of advice points to. Pure: no ORM, no I/O.

The advisor's rules say what the metrics show; this adds the profile change that addresses it,
judged against the profile the deployment was filled from:

* requests queue: from throughput (or custom), the latency profile's low target of ongoing
  requests adds replicas before requests wait; from cost, the throughput profile allows more
  replicas than one.
* slow first tokens: the latency profile's smaller prefill chunks and lower target.
* a full KV cache that preempts: the throughput profile (FP8 where the GPU allows halves the
  weights and leaves the memory to the cache; more replicas share the sequences).
* idle: the cost profile (scale to zero where the backend can).

A deployment already on the suggested profile gets no profile hint: the advice's own tuning
words apply then.
"""

from __future__ import annotations

from dataclasses import replace

from deployments.choices import ServingProfile
from deployments.profiles import SUMMARY
from metrics.advisor import Advice

_BY_CODE = {
    "slow_first_token": lambda current: ServingProfile.LATENCY,
    "kv_cache_pressure": lambda current: ServingProfile.THROUGHPUT,
    "idle": lambda current: ServingProfile.COST,
    "scale_out": lambda current: (
        ServingProfile.THROUGHPUT if current == ServingProfile.COST else ServingProfile.LATENCY
    ),
}


def _why(code: str, target: str, scale_to_zero: bool) -> str:
    if target == ServingProfile.COST:
        return "scale to zero while nobody calls it" if scale_to_zero else "one replica, the fewest GPUs"
    if target == ServingProfile.THROUGHPUT and code == "scale_out":
        return "more replicas than one"
    return SUMMARY[ServingProfile(target)]


def profile_hint(code: str, current: str, *, scale_to_zero: bool) -> tuple[str, str] | None:
    """(suggested profile, sentence) for advice `code` on a deployment with profile `current`
    ("" = custom), or None when it has that profile already or the advice names none."""
    choose = _BY_CODE.get(code)
    if choose is None:
        return None
    target = choose(current)
    if target == current:
        return None
    label = ServingProfile(target).label.lower()
    why = _why(code, target, scale_to_zero)
    if current:
        sentence = f"Switch from the {ServingProfile(current).label.lower()} profile to the {label} profile ({why})."
    else:
        sentence = f"The {label} serving profile sets this up ({why})."
    return target, sentence


def with_profile_hints(advice: list[Advice], *, current: str, scale_to_zero: bool) -> list[Advice]:
    """`advice` with each piece's profile change named in its message and its `profile` field."""
    out = []
    for item in advice:
        hint = profile_hint(item.code, current, scale_to_zero=scale_to_zero)
        if hint is None:
            out.append(item)
        else:
            out.append(replace(item, profile=hint[0], message=f"{item.message} {hint[1]}"))
    return out
