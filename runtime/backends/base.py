"""What every backend is, and what the two cluster backends (kuberay, kserve) share.

A backend knows how to make a deployment's workload exist and match its spec (`ensure`), read
it (`observe`), remove it (`remove`) and list what it owns in a namespace (`list_owned`, used by
the sweep). The reconciler decides *when*; backends only know *how*.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from typing import Any, Protocol

from runtime import k8s
from runtime.backends.exposure import (
    WAITING,
    expose,
    exposure_digest,
    exposure_of,
    external_endpoint,
    record_exposure,
    unexpose,
)
from runtime.backends.insight import ClusterInsight
from runtime.manifests.common import (
    ANNOTATION_EXPOSURE,
    ANNOTATION_GENERATION,
    ANNOTATION_SPEC_HASH,
    LABEL_DEPLOYMENT_ID,
    LABEL_JOB_UID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)
from runtime.spec import DeploymentSpec, GatewaySpec, PlatformSpec
from runtime.status import Observation, absent_observation, current_workload, with_kueue_history


class Backend(Protocol):
    name: str

    def ensure(self, spec: DeploymentSpec) -> Observation: ...

    def observe(self, spec: DeploymentSpec) -> Observation: ...

    def remove(self, spec: DeploymentSpec) -> bool: ...

    def list_owned(self, namespace: str) -> dict[int, dict[str, Any]]: ...

    # Operating visibility (runtime.backends.insight; the local backend has its own).
    def events(self, spec: DeploymentSpec) -> list[dict[str, Any]]: ...

    def logs(self, spec: DeploymentSpec, *, lines=None, max_bytes=None, secrets=()) -> list[dict[str, Any]]: ...

    def startup(self, spec: DeploymentSpec) -> dict[str, Any]: ...

    # A tenant's API keys changed: hand the running engine of `deployment_id` its current set.
    def refresh_keys(self, *, tenant_slug: str, deployment_id: int) -> bool: ...


def digest(value: Any) -> str:
    """A short stable hash of JSON-able data: the spec hashes stamped on objects and state files."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def stamp(obj: dict[str, Any], spec: DeploymentSpec) -> dict[str, str]:
    """Annotate a rendered object with the generation it runs and its spec hash; returns the
    annotations. An unchanged hash is what lets `ensure` skip the write."""
    annotations = obj["metadata"].setdefault("annotations", {})
    annotations[ANNOTATION_GENERATION] = str(spec.generation)
    annotations[ANNOTATION_SPEC_HASH] = digest(obj["spec"])
    return annotations


def annotation(obj: dict[str, Any], key: str) -> str | None:
    """One annotation of an object read from the cluster (None when absent)."""
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(key)


def stale(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether the object on the cluster is not what `desired` wants: another spec, or an
    exposure that is not (or no longer known to be) enforced. The one rule for ensure and sweep."""
    return any(
        annotation(current, key) != annotation(desired, key) for key in (ANNOTATION_SPEC_HASH, ANNOTATION_EXPOSURE)
    )


class ClusterObjectBackend(ClusterInsight, ABC):
    """A deployment served by one custom object that Kueue admits through the tenant's LocalQueue.

    Subclasses name the `kind`, render it (`desired`), converge it (`ensure`) and read its
    status (`status`); finding its Workload, observing, removing and listing are shared.
    """

    name: str
    kind: k8s.Kind

    def __init__(
        self, cluster: k8s.Cluster, platform: PlatformSpec, gateway: GatewaySpec | None = None, key_seed: str = ""
    ):
        self.cluster = cluster
        self.platform = platform
        self.gateway = gateway  # None: not exposed on a Gateway (runtime.backends.exposure)
        self.key_seed = key_seed  # derives the Try-it key (runtime.keys)

    def refresh_keys(self, *, tenant_slug: str, deployment_id: int) -> bool:
        """Nothing to hand over: the gateway reads each key's Secret itself (access.keystore)."""
        return False

    def expose_stamp(self, obj: dict[str, Any], spec: DeploymentSpec) -> None:
        """Fold the exposure objects' hash into the object's spec hash: a changed route or limit
        makes the object (and its exposure) apply again, and the sweep sees it as drift. What is
        wanted is an enforced exposure (runtime.backends.exposure)."""
        extra = exposure_digest(spec, self.gateway)
        if extra:
            annotations = obj["metadata"]["annotations"]
            annotations[ANNOTATION_SPEC_HASH] = digest([annotations[ANNOTATION_SPEC_HASH], extra])
            record_exposure(obj, spec, self.gateway, None)

    def expose(self, spec: DeploymentSpec, desired: dict[str, Any], events: list[tuple[str, str, str]]) -> None:
        """Apply the deployment's policies, route and Try-it key (nothing without a Gateway),
        policies first and the route parked until Kuadrant enforces the AuthPolicy; stamp the
        verdict on `desired`, the object about to be applied."""
        verdict = expose(self.cluster, spec, self.gateway, self.key_seed)
        record_exposure(desired, spec, self.gateway, verdict)
        if verdict is not None:  # waiting for Kuadrant is the normal course; a policy it cannot take is not
            expected = verdict.exposed or verdict.reason == WAITING
            events.append(("Normal" if expected else "Warning", verdict.reason, verdict.message))

    @abstractmethod
    def desired(self, spec: DeploymentSpec) -> dict[str, Any]:
        """The object to apply for `spec` (rendered, with the portal's annotations)."""

    @abstractmethod
    def ensure(self, spec: DeploymentSpec) -> Observation:
        """Create or update the object so it matches `spec`, then observe it."""

    @abstractmethod
    def status(self, spec: DeploymentSpec, obj: dict, workload: dict | None) -> Observation:
        """State and conditions from the object and its Kueue Workload (None: no Workload yet)."""

    def _create(self, spec: DeploymentSpec, desired: dict[str, Any], events: list[tuple[str, str, str]]) -> dict:
        self.expose(spec, desired, events)
        current = self.cluster.apply(desired)
        events.append(("Normal", "Created", f"{self.kind.kind} {spec.name} created in {spec.namespace}."))
        return current

    def _workload(self, obj: dict) -> dict | None:
        uid = (obj.get("metadata") or {}).get("uid")
        if not uid:
            return None
        found = self.cluster.list(k8s.WORKLOAD, obj["metadata"]["namespace"], label_selector={LABEL_JOB_UID: uid})
        return current_workload(found)

    def _observe(self, spec: DeploymentSpec, obj: dict, events: list) -> Observation:
        workload = self._workload(obj)
        obs = self._exposure(spec, obj, with_kueue_history(self.status(spec, obj, workload), workload))
        obs.events = events + obs.events
        return obs

    def _exposure(self, spec: DeploymentSpec, obj: dict, obs: Observation) -> Observation:
        """Add the Exposed condition; an exposure Kuadrant does not enforce yet is not converged
        (the reconcile looks again, and the sweep sees drift)."""
        verdict = exposure_of(obj, spec, self.gateway)
        if verdict is not None:
            obs.conditions = [*obs.conditions, verdict.condition()]
            obs.converged = obs.converged and verdict.exposed
        return obs

    def public_endpoint(self, spec: DeploymentSpec, obj: dict, internal: str | None) -> str | None:
        """The endpoint users call: the Gateway's route when one is configured, once Kuadrant
        enforces its AuthPolicy ("" until then)."""
        return external_endpoint(spec, self.gateway, internal, obj)

    def observe(self, spec: DeploymentSpec) -> Observation:
        current = self.cluster.get(self.kind, spec.name, spec.namespace)
        if current is None:
            return absent_observation(reason="NotFound", message=f"The {self.kind.kind} does not exist.")
        return self._observe(spec, current, [])

    def remove(self, spec: DeploymentSpec) -> bool:
        """Delete the route and policies, then the object; True once it is gone (finalizers may
        keep it a while)."""
        unexpose(self.cluster, spec, self.gateway)
        return self.remove_workload(spec)

    def remove_workload(self, spec: DeploymentSpec) -> bool:
        """Delete the object only, leaving the exposure, which every backend of the deployment
        names alike: a stray on another backend must not take the serving one's policy away."""
        if self.cluster.get(self.kind, spec.name, spec.namespace) is None:
            return True
        self.cluster.delete(self.kind, spec.name, spec.namespace)
        return self.cluster.get(self.kind, spec.name, spec.namespace) is None

    def list_owned(self, namespace: str) -> dict[int, dict[str, Any]]:
        owned = {}
        for obj in self.cluster.list(self.kind, namespace, label_selector={LABEL_MANAGED_BY: MANAGED_BY}):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            try:
                owned[int(labels.get(LABEL_DEPLOYMENT_ID, ""))] = obj
            except ValueError:
                continue
        return owned

    def list_workloads(self, namespace: str) -> dict[str, dict]:
        """The namespace's Workloads by the uid of the job each stands for (one LIST)."""
        return self.index_workloads(namespace, self.cluster.list(k8s.WORKLOAD, namespace), None)

    def index_workloads(
        self, namespace: str, workloads: list[dict], owned: dict[int, dict[str, Any]] | None
    ) -> dict[str, dict]:
        """`workloads` (the namespace's, listed once by the sweep for every backend) by the uid of
        the job each stands for: Kueue's job-uid label, the live slice of an elastic job. A
        backend whose Workloads belong to something else (KServe: each predictor pod) adds its
        objects' from `owned` (its `list_owned` answer)."""
        grouped: dict[str, list[dict]] = {}
        for wl in workloads:
            uid = ((wl.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB_UID)
            if uid:
                grouped.setdefault(uid, []).append(wl)
        return {uid: current_workload(found) for uid, found in grouped.items()}

    def sweep_observation(self, spec: DeploymentSpec, obj: dict, workloads: dict[str, dict]) -> Observation:
        """Observation from objects already listed by the sweep (no extra API calls)."""
        workload = workloads.get((obj.get("metadata") or {}).get("uid"))
        return self._exposure(spec, obj, with_kueue_history(self.status(spec, obj, workload), workload))
