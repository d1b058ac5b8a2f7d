"""Ray's accelerator type names: what a flavor's `accelerator_type` may be.

The kuberay backend puts the flavor's accelerator type into the Ray Serve LLM config
(runtime.manifests.rayservice.llm_config), and Ray Serve LLM refuses a name it does not know when
it builds the app: `LLMConfig.validate_accelerator_type` in
ray-project/ray python/ray/llm/_internal/serve/core/configs/llm_config.py (tag ray-2.60.0) checks
`value not in [t.value for t in AcceleratorType]`, an exact, case-sensitive membership test, after
turning "A10" into "A10G". `AcceleratorType` is `Enum("AcceleratorType", vars(accelerators))`
(python/ray/llm/_internal/serve/core/configs/accelerators.py, same tag): the string constants of
python/ray/util/accelerators/accelerators.py. Ray's refusal surfaces only as DEPLOY_FAILED after
the GPU workers started, so the portal checks the name when the flavor is saved instead.

RAY_ACCELERATOR_TYPES below are those constants' values, in Ray's order, read from the ray 2.60.0
wheel (`ray[serve]==2.60.0`, pyproject's `local` extra; its ray/_version.py names commit
b7f4259e944bf6959f721b106adc366ddfa0c356). When the Ray pin moves, read that file again and update
the tuple and RAY_VERSION (tests/runtime/test_accelerators.py pins the count and a few members).

`CPU` is not Ray's: it is the portal's name for a flavor without an accelerator (the local
backend's CPU engine). Ray refuses an `accelerator_type` on a CPU-only config (`accelerator_type=...
cannot be used with CPU-only configurations`, llm_config.py, same tag), so it is never rendered.
"""

from __future__ import annotations

import difflib
import re

RAY_VERSION = "2.60.0"

RAY_ACCELERATOR_TYPES: tuple[str, ...] = (
    # NVIDIA
    "V100",
    "P100",
    "T4",
    "P4",
    "K80",
    "A10G",
    "L4",
    "L40S",
    "A100",
    "H100",
    "H200",
    "H20",
    "B200",
    "B300",
    "GB200",
    "GB300",
    "RTX-PRO-6000",
    # Intel
    "Intel-GPU-Max-1550",
    "Intel-GPU-Max-1100",
    "Intel-GAUDI",
    # AMD
    "AMD-Instinct-MI100",
    "AMD-Instinct-MI250X",
    "AMD-Instinct-MI250X-MI250",
    "AMD-Instinct-MI210",
    "AMD-Instinct-MI300A",
    "AMD-Instinct-MI300X-OAM",
    "AMD-Instinct-MI300X-HF",
    "AMD-Instinct-MI308X",
    "AMD-Instinct-MI325X-OAM",
    "AMD-Instinct-MI350X-OAM",
    "AMD-Instinct-MI355X-OAM",
    "AMD-Radeon-R9-200-HD-7900",
    "AMD-Radeon-HD-7900",
    # AWS, Google, Huawei, MetaX, Furiosa
    "aws-neuron-core",
    "TPU-V2",
    "TPU-V3",
    "TPU-V4",
    "TPU-V5P",
    "TPU-V5LITEPOD",
    "TPU-V6E",
    "TPU-V7X",
    "Ascend910B",
    "Ascend910B4",
    "MXC500",
    "MXC550",
    "FURIOSA_RNGD",
    # Apple
    "M1",
    "M1-Pro",
    "M1-Max",
    "M1-Ultra",
    "M2",
    "M2-Pro",
    "M2-Max",
    "M2-Ultra",
    "M3",
    "M3-Pro",
    "M3-Max",
    "Apple-Silicon",
    # Sized A100s: Ray does not add these node labels itself (the note in accelerators.py)
    "A100-40G",
    "A100-80G",
    # Mobilint
    "MOBILINT_ARIES",
    "MOBILINT_REGULUS",
)

# Names Ray Serve LLM accepts and rewrites before checking (llm_config.py: "A10" becomes "A10G").
RAY_ALIASES: dict[str, str] = {"A10": "A10G"}

CPU_ONLY = "CPU"  # the portal's name for a flavor with no accelerator; never given to Ray

# What the flavor form offers: Ray's names, then the portal's CPU-only name.
OFFERED: tuple[str, ...] = (*RAY_ACCELERATOR_TYPES, CPU_ONLY)

_KNOWN = frozenset(RAY_ACCELERATOR_TYPES) | frozenset(RAY_ALIASES) | {CPU_ONLY}
_BY_LOWER = {name.lower(): name for name in OFFERED}


def ray_accelerator_type(value: str) -> str | None:
    """The `accelerator_type` for the Ray Serve LLM config, or None where there is none to give
    (empty, or the portal's CPU-only name)."""
    return None if not value or value == CPU_ONLY else value


def closest(value: str, *, count: int = 3) -> list[str]:
    """The offered names nearest to `value`, ignoring case: one that differs only in case; else
    those containing it ("MI300X"), then the most alike (difflib), then those it contains as a
    word ("Nvidia H100")."""
    lowered = value.strip().lower()
    if lowered in _BY_LOWER:
        return [_BY_LOWER[lowered]]
    containing = [name for low, name in _BY_LOWER.items() if len(lowered) >= 3 and lowered in low]
    alike = [_BY_LOWER[m] for m in difflib.get_close_matches(lowered, list(_BY_LOWER), n=count, cutoff=0.6)]
    words = set(re.split(r"[^a-z0-9]+", lowered))
    named = [name for low, name in _BY_LOWER.items() if low in words]
    return list(dict.fromkeys(containing + alike + named))[:count]


def accelerator_type_problem(value: str) -> str | None:
    """Why Ray Serve LLM would refuse `value` as an accelerator type, in words that suggest the
    nearest names; None if Ray accepts it (or it is empty: whether it may be is the field's rule)."""
    if not value or value in _KNOWN:
        return None
    near = closest(value)
    if len(near) == 1 and near[0].lower() == value.lower():
        return f"{value!r} is not one of Ray's accelerator types (Ray matches case exactly); did you mean {near[0]}?"
    if near:
        return f"{value!r} is not one of Ray's accelerator types; did you mean {_either(near)}?"
    return (
        f"{value!r} is not one of Ray's accelerator types (Ray {RAY_VERSION}), e.g. H100, A100, L4, "
        f"or {CPU_ONLY} for a flavor without an accelerator."
    )


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
