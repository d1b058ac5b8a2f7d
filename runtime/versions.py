"""The version matrix: the one place that says which version of each cluster component the portal
is tested on, the oldest it supports, and how a version found on a cluster is judged.

The readiness page (runtime.readiness_install) checks what it finds against `VERSIONS`; the
real-control-plane test harness starts the tested versions (../shared/k8s/README.md lists the
binaries: Kubernetes 1.36.2, Kueue 0.19.2, KubeRay 1.6.2, KServe 0.20.0, Karpenter 1.14.1, etcd
3.6.16, KWOK 0.8.0). Gateway API and Kuadrant were never run here as live controllers: only their
CRD schemas (../shared/schemas/crds) are, so their `tested` is None.

`check(component, found)` answers ("ok" | "warn" | "fail", a sentence):

* fail — older than `minimum` (the portal uses an API or a behaviour it does not have);
* warn — the version cannot be read, is newer than `newest` (or than the tested minor), or falls
  in a range with a known difference (`cautions`), or the component was never tested live;
* ok — from `minimum` up to the tested minor (patch releases of it included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "fail"
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Caution:
    """From `since` on (inclusive), the component behaves in a way the portal was not tested
    against: found versions in that range are a warning with `message`."""

    since: str
    message: str


@dataclass(frozen=True)
class Component:
    """One component of the install. Versions are "MAJOR.MINOR.PATCH" strings without the "v"."""

    name: str
    tested: str | None  # None: not tested on a live controller
    minimum: str | None  # None: no known lower bound (older than tested is only a warning)
    newest: str | None = None  # the newest MAJOR.MINOR supported, when another component caps it
    cautions: tuple[Caution, ...] = ()
    note: str = ""  # where `tested` and `minimum` come from


VERSIONS: dict[str, Component] = {
    "kubernetes": Component(
        "Kubernetes",
        tested="1.36.2",
        minimum="1.34.0",
        newest="1.36",
        note="Kueue 0.19.2 is tested on Kubernetes 1.34, 1.35 and 1.36.",
    ),
    "kueue": Component(
        "Kueue",
        tested="0.19.2",
        minimum="0.16.0",
        note="The portal writes kueue.x-k8s.io/v1beta2, Kueue's storage version since 0.16.",
    ),
    "kuberay": Component(
        "KubeRay",
        tested="1.6.2",
        minimum="1.6.0",
        cautions=(
            Caution(
                "1.7.0",
                "by its code KubeRay 1.7 copies `suspend` to the RayCluster only at creation; "
                "the portal is tested on 1.6.2",
            ),
        ),
        note="KubeRay 1.7.0 was not obtainable for the tests.",
    ),
    "kserve": Component(
        "KServe",
        tested="0.20.0",
        minimum=None,
        note="Tested in Standard (raw Deployment) mode; no Knative.",
    ),
    "gateway-api": Component(
        "Gateway API",
        tested=None,
        minimum="1.0.0",
        note="Not tested on a live controller. CRD schemas: gateway-api main after v1.6.1 (their "
        "gateway.networking.k8s.io/bundle-version says v0.0.0-dev); Gateway and HTTPRoute at v1, "
        "which v1.0.0 made standard.",
    ),
    "kuadrant": Component(
        "Kuadrant",
        tested=None,
        minimum=None,
        note="Not tested on a live controller. CRD schemas: kuadrant-operator (AuthPolicy and "
        "RateLimitPolicy v1, TokenRateLimitPolicy v1alpha1); the files name no release.",
    ),
    "karpenter": Component(
        "Karpenter",
        tested="1.14.1",
        minimum="1.0.0",
        note="karpenter.sh/v1 NodePools and NodeClaims (v1.0.0 on); tested with its KWOK provider.",
    ),
    "etcd": Component("etcd", tested="3.6.16", minimum=None, note="The test control plane's store."),
    "kwok": Component("KWOK", tested="0.8.0", minimum=None, note="The test control plane's fake nodes."),
}


def parse(version: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of "v1.36.2", "1.36.2-gke.100", "v0.19.2+abc"; None if unreadable."""
    match = _VERSION.match((version or "").strip())
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def check(component: str, found: str | None) -> tuple[str, str]:
    """(OK | WARN | FAIL, what to tell an admin) for `found` of `component` (a VERSIONS key)."""
    spec = VERSIONS[component]
    version = parse(found)
    tested = f"tested on {spec.tested}" if spec.tested else "not tested on a live controller"
    if version is None:
        return WARN, f"{spec.name} version unknown ({tested})."
    shown = "{}.{}.{}".format(*version)
    minimum = parse(spec.minimum)
    if minimum is not None and version < minimum:
        return FAIL, f"{spec.name} {shown} is older than {spec.minimum}, the oldest the portal supports ({tested})."
    for caution in sorted(spec.cautions, key=lambda c: parse(c.since) or (0, 0, 0), reverse=True):
        if version >= (parse(caution.since) or (0, 0, 0)):
            return WARN, f"{spec.name} {shown}: {caution.message}."
    newest = parse(spec.newest or spec.tested)
    if newest is not None and version[:2] > newest[:2]:
        return WARN, f"{spec.name} {shown} is newer than {newest[0]}.{newest[1]} ({tested}). {spec.note}".strip()
    if spec.tested is None:
        return WARN, f"{spec.name} {shown}: {tested}."
    tested_version = parse(spec.tested)
    if minimum is None and tested_version is not None and version[:2] < tested_version[:2]:
        return WARN, f"{spec.name} {shown} is older than the tested {spec.tested}."
    return OK, f"{spec.name} {shown} ({tested})."
