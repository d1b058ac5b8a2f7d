"""`Cluster`: one Kubernetes API endpoint, speaking plain dicts (see the package docstring)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client import rest as k8s_rest

from runtime.k8s.errors import NotFound, TransientClusterError, _translated_errors
from runtime.k8s.kinds import (
    NAMESPACE,
    PENDING_WORKLOADS_PATH,
    PVC,
    SECRET,
    Kind,
    _selector_string,
    kind_of,
    labels_match,
)
from runtime.k8s.reads import OperatingReads

FIELD_MANAGER = "llm-portal"
DEFAULT_TIMEOUT_SECONDS = 10.0


# --- the cluster -----------------------------------------------------------------------------


class Cluster(OperatingReads):
    """One Kubernetes API endpoint. Thread-safe: share one per process.

    All methods take and return plain dicts (the JSON the API server speaks), never client
    models, so callers and tests compare manifests directly.
    """

    def __init__(self, api_client: k8s_client.ApiClient, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        # No hidden urllib3 retries: see the module docstring. The pool manager copies the
        # setting when the ApiClient is built, so a client built with retries on gets a new
        # REST layer (the factories below build theirs with retries off from the start).
        if api_client.configuration.retries is not False:
            api_client.configuration.retries = False
            api_client.rest_client = k8s_rest.RESTClientObject(api_client.configuration)
        self.api_client = api_client
        self.timeout = timeout
        self.core = k8s_client.CoreV1Api(api_client)
        self.custom = k8s_client.CustomObjectsApi(api_client)
        # API calls per verb, so benchmarks can report calls per reconcile.
        self.calls: Counter[str] = Counter()
        self._calls_lock = threading.Lock()

    # construction

    @classmethod
    def for_url(cls, url: str, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> Cluster:
        """A cluster at a plain URL with no credentials: the API test server, a kubectl proxy."""
        configuration = k8s_client.Configuration(host=url.rstrip("/"))
        configuration.retries = False
        return cls(k8s_client.ApiClient(configuration), timeout=timeout)

    @classmethod
    def for_kubeconfig(
        cls, path: str, *, context: str | None = None, timeout: float = DEFAULT_TIMEOUT_SECONDS
    ) -> Cluster:
        """A cluster from a kubeconfig file (developer machines, CI against kind)."""
        from kubernetes import config

        configuration = k8s_client.Configuration()
        configuration.retries = False
        api_client = config.new_client_from_config(
            config_file=path, context=context, client_configuration=configuration
        )
        return cls(api_client, timeout=timeout)

    @classmethod
    def in_cluster(cls, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> Cluster:
        """A cluster from the pod's ServiceAccount (production)."""
        from kubernetes import config

        configuration = k8s_client.Configuration()
        configuration.retries = False
        config.load_incluster_config(client_configuration=configuration)
        return cls(k8s_client.ApiClient(configuration), timeout=timeout)

    @classmethod
    def from_settings(cls) -> Cluster:
        """The cluster from settings: KUBERNETES_URL, else KUBECONFIG, else in-cluster config."""
        # Imported here so this module stays usable (and testable) without Django configured.
        from django.conf import settings

        timeout = float(getattr(settings, "KUBERNETES_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS))
        url = getattr(settings, "KUBERNETES_URL", None)
        kubeconfig = getattr(settings, "KUBECONFIG", None)
        if url:
            return cls.for_url(url, timeout=timeout)
        if kubeconfig:
            return cls.for_kubeconfig(kubeconfig, timeout=timeout)
        return cls.in_cluster(timeout=timeout)

    def close(self) -> None:
        """Release the connection pool."""
        self.api_client.close()

    # reads

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            if kind.is_core:
                method = getattr(self.core, _core_method(_CORE_GET, kind))
                args = (name,) if not kind.namespaced else (name, _require_namespace(kind, namespace))
                return self._call("get", method, *args)
            return self._custom("get", "get", kind, namespace, name)
        except NotFound:
            return None

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Objects of `kind` (in `namespace`, or all namespaces when None) matching the labels.

        `label_selector` is equality-only (`{"key": "value"}`), which is all the portal needs.
        It is sent to the server *and* applied here: the kmock test server ignores selectors,
        and filtering twice costs nothing against a real API server.
        """
        selector = _selector_string(label_selector)
        if kind.is_core:
            method = getattr(self.core, _core_method(_CORE_LIST, kind))
            args = (_require_namespace(kind, namespace),) if kind.namespaced else ()
            body = self._call("list", method, *args, label_selector=selector)
        else:  # a namespaced kind without a namespace lists across all namespaces
            body = self._custom(
                "list",
                "list",
                kind,
                namespace,
                label_selector=selector,
                namespaced=kind.namespaced and namespace is not None,
            )
        items = body.get("items") or []
        return [item for item in items if labels_match(item, label_selector)]

    def pending_workloads(self, cluster_queue: str, *, limit: int = 1000) -> list[dict[str, Any]]:
        """The ClusterQueue's pending workloads from Kueue's visibility API, head of the queue
        first; each item has `metadata` (name, namespace, ownerReferences), `priority`,
        `localQueueName`, `positionInClusterQueue` and `positionInLocalQueue` (both from 0).

        The version read is `visibility_version()` (v1beta2, else v1beta1). Raises NotFound when
        the ClusterQueue (or the visibility API) does not exist.
        """
        request = self.api_client.param_serialize(
            method="GET",
            resource_path=PENDING_WORKLOADS_PATH,
            path_params={"version": self.visibility_version(), "name": cluster_queue},
            query_params=[("limit", limit)],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )

        def get(**kwargs: Any) -> Any:
            # The generated client has no method for an aggregated API's subresource; this is
            # the call its custom-object methods make, with the same error handling.
            return self.api_client._call_with_legacy_options(
                request, {"200": "object"}, None, False, kwargs["_request_timeout"], True
            )

        body = self._call("pending_workloads", get)
        items = body.get("items") or []
        return sorted(items, key=lambda item: int(item.get("positionInClusterQueue") or 0))

    # writes

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply `obj` as field manager "llm-portal" (force), creating it if absent.

        The caller must leave out every field another controller owns — above all
        `spec.rayClusterConfig.suspend`, which Kueue flips to admit a job: with force=True we
        would take that field over and un-suspend a workload Kueue is holding back.
        """
        kind = kind_of(obj)
        name = obj["metadata"]["name"]
        namespace = obj["metadata"].get("namespace")
        body = dict(obj)
        if kind == SECRET:
            return self._apply_secret(name, namespace, body)
        try:
            return self._patch_apply(kind, name, namespace, body)
        except NotFound:
            # A real API server creates the object on apply; kmock 0.8 answers 404 instead.
            # Creating is the same end state. A second 404 (e.g. the namespace is missing)
            # propagates from create.
            return self._create(kind, namespace, body)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> bool:
        """Delete the object; False when it was already gone (deleting is idempotent)."""
        try:
            if kind == SECRET:
                self._call("delete", self.core.delete_namespaced_secret, name, _require_namespace(kind, namespace))
            elif _core_namespace(kind):
                self._call("delete", self.core.delete_namespace, name)
            else:
                self._custom("delete", "delete", kind, namespace, name, propagation_policy="Background")
        except NotFound:
            return False
        return True

    # The tenant's model-cache claim (quotas.model_cache): created when absent, and otherwise only
    # its storage request raised (a PVC's other fields are immutable once bound; never shrunk).

    def create_claim(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create a PersistentVolumeClaim (AlreadyExists is a PermanentClusterError)."""
        if kind_of(obj) != PVC:
            raise ValueError("create_claim creates PersistentVolumeClaims only")
        namespace = _require_namespace(PVC, obj["metadata"].get("namespace"))
        create = self.core.create_namespaced_persistent_volume_claim
        return self._call("create", create, namespace, dict(obj), field_manager=FIELD_MANAGER)

    def patch_claim_storage(self, name: str, namespace: str, storage: str) -> dict[str, Any]:
        """Merge-patch a claim's `spec.resources.requests.storage` (a volume expansion: the API
        server refuses it unless the claim's StorageClass has allowVolumeExpansion)."""
        body = {"spec": {"resources": {"requests": {"storage": storage}}}}
        patch = self.core.patch_namespaced_persistent_volume_claim
        return self._call(
            "patch",
            patch,
            name,
            _require_namespace(PVC, namespace),
            body,
            field_manager=FIELD_MANAGER,
            _content_type="application/merge-patch+json",
        )

    def patch_merge(self, kind: Kind, name: str, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of a custom object: a key set to None is removed, a list
        replaced whole. With `metadata.resourceVersion` in `body` the API server refuses it (409)
        when the object changed since that read."""
        return self._custom(
            "patch", "patch", kind, namespace, name, dict(body), _content_type="application/merge-patch+json"
        )

    def patch_status(self, kind: Kind, name: str, namespace: str | None, status: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource. Only simulated operators in tests write status."""
        body = {"status": dict(status)}
        if _core_namespace(kind):
            return self._call("patch_status", self.core.patch_namespace_status, name, body)
        return self._custom(
            "patch_status",
            "patch",
            kind,
            namespace,
            name,
            body,
            suffix="_status",
            _content_type="application/merge-patch+json",
        )

    # internals

    def _patch_apply(self, kind: Kind, name: str, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        apply_args: dict[str, Any] = {
            "field_manager": FIELD_MANAGER,
            "force": True,
            "_content_type": "application/apply-patch+yaml",
        }
        if _core_namespace(kind):
            return self._call("apply", self.core.patch_namespace, name, body, **apply_args)
        return self._custom("apply", "patch", kind, namespace, name, body, **apply_args)

    def _apply_secret(self, name: str, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """API-key Secrets (the access app, in the key namespace) and the tenants' credential
        Secrets (quotas.tenant_secrets, in tenant namespaces), never read back: apply, or create
        where the test server answers apply on a missing object with 404."""
        namespace = _require_namespace(SECRET, namespace)
        try:
            return self._call(
                "apply",
                self.core.patch_namespaced_secret,
                name,
                namespace,
                body,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
            )
        except NotFound:
            create = self.core.create_namespaced_secret
            return self._call("create", create, namespace, body, field_manager=FIELD_MANAGER)

    def _create(self, kind: Kind, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        if _core_namespace(kind):
            return self._call("create", self.core.create_namespace, body, field_manager=FIELD_MANAGER)
        return self._custom("create", "create", kind, namespace, body, field_manager=FIELD_MANAGER)

    def _custom(
        self,
        verb: str,
        op: str,
        kind: Kind,
        namespace: str | None,
        *tail: Any,
        suffix: str = "",
        namespaced: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """One CustomObjectsApi call: `<op>_namespaced_custom_object<suffix>(group, version,
        namespace, plural, *tail)` or its cluster-scoped twin (no namespace argument)."""
        namespaced = kind.namespaced if namespaced is None else namespaced
        if namespaced:
            method = getattr(self.custom, f"{op}_namespaced_custom_object{suffix}")
            args = (kind.group, kind.version, _require_namespace(kind, namespace), kind.plural, *tail)
        else:
            method = getattr(self.custom, f"{op}_cluster_custom_object{suffix}")
            args = (kind.group, kind.version, kind.plural, *tail)
        return self._call(verb, method, *args, **kwargs)

    def _count(self, verb: str) -> None:
        with self._calls_lock:
            self.calls[verb] += 1

    def _call(self, verb: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one API call with our timeout; return the response body as a dict.

        `_preload_content=False` skips the client's model deserialisation: core calls would
        otherwise return models and custom-object create on a 200 answer returns None.
        """
        self._count(verb)
        with _translated_errors():
            response = method(*args, _request_timeout=self.timeout, _preload_content=False, **kwargs)
            # Reading the body can still time out or hit a dropped connection.
            data = response.data
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError as exc:
            raise TransientClusterError(f"{verb}: the API server sent invalid JSON") from exc


# The core kinds the portal reads, and how: CoreV1Api method names by plural. Every other core
# call is refused here (Namespaces, and API-key Secrets in the key namespace, are the only core
# kinds the portal writes, with the tenants' model-cache claims: create_claim, patch_claim_storage).
_CORE_GET = {
    "namespaces": "read_namespace",
    "persistentvolumeclaims": "read_namespaced_persistent_volume_claim",
    "configmaps": "read_namespaced_config_map",
}
_CORE_LIST = {
    "namespaces": "list_namespace",
    "pods": "list_namespaced_pod",
    "events": "list_namespaced_event",
    "nodes": "list_node",
}


def _core_method(table: dict[str, str], kind: Kind) -> str:
    if kind.plural not in table:
        raise ValueError(f"the portal does not {'list' if table is _CORE_LIST else 'read'} {kind.kind} objects")
    return table[kind.plural]


def _core_namespace(kind: Kind) -> bool:
    """Whether a write goes to the core Namespace calls; the portal writes no other core kind."""
    if kind.is_core and kind != NAMESPACE:
        raise ValueError(f"the portal never writes {kind.kind} objects")
    return kind.is_core


def _require_namespace(kind: Kind, namespace: str | None) -> str:
    if not namespace:
        raise ValueError(f"{kind.kind} is namespaced: pass a namespace")
    return namespace
