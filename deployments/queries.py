"""Read-side helpers: the derived badge."""

from __future__ import annotations

from deployments.choices import State
from deployments.models import ModelDeployment
from deployments.states import SERVING


def derived_badge(dep: ModelDeployment) -> str:
    """The one-word badge: the state, or 'updating' while a newer spec is not yet converged."""
    if dep.state in SERVING and dep.observed_generation < dep.generation:
        return "updating"
    ready = dep.condition("Ready")
    if dep.state == State.READY and ready and ready.get("reason") == "ScaledToZero":
        return "scaled_to_zero"
    return dep.state
