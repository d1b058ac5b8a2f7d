"""The cluster layer: the only module in the project that imports `kubernetes`.

Everything above it (reconcile, status, quota sync) speaks plain dicts and three kinds of
error, so it never learns about `ApiException`, urllib3 or sockets:

* `TransientClusterError` — the same call may succeed later (5xx, 429, timeouts, refused or
  dropped connections). Celery tasks retry these (`autoretry_for=(TransientClusterError,)`).
* `PermanentClusterError` — retrying the same call cannot help (400, 403, 409, 422, other 4xx,
  TLS misconfiguration). The reconciler records it as a condition instead.
* `NotFound` — a 404. It subclasses `PermanentClusterError` because the *same* call will not
  start to succeed on its own; callers that treat "gone" as a normal state (`get`, `delete`)
  catch it here and return None/False, so it rarely escapes this module.

Every call carries a request timeout and the field manager "llm-portal". urllib3's own
retries are switched off: retrying is decided in one place (the task layer), and a hidden
retry would multiply the timeout by four on reads and hide failures from the call counter.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s_client
from kubernetes.client import rest as k8s_rest
from kubernetes.client.exceptions import ApiException

FIELD_MANAGER = "llm-portal"
DEFAULT_TIMEOUT_SECONDS = 10.0

_T = TypeVar("_T")


# --- errors ----------------------------------------------------------------------------------


class ClusterError(Exception):
    """Any failure talking to the Kubernetes API; `status` is the HTTP status or None."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TransientClusterError(ClusterError):
    """A failure that may go away on its own: retry later, with backoff."""


class PermanentClusterError(ClusterError):
    """A failure that repeating the same request cannot fix: record it, do not retry."""


class NotFound(PermanentClusterError):
    """The object (or its namespace, or the resource type) does not exist: HTTP 404."""


# 408 Request Timeout and 429 Too Many Requests are 4xx but explicitly invite a retry.
_TRANSIENT_4XX = frozenset({408, 429})


def classify_api_exception(exc: ApiException) -> ClusterError:
    """Map an `ApiException` to our error kinds by its HTTP status."""
    status = int(exc.status or 0)
    message = _api_message(exc)
    if status == 404:
        return NotFound(message, status=status)
    if status >= 500 or status in _TRANSIENT_4XX:
        return TransientClusterError(message, status=status)
    # 400, 401, 403, 409, 422 … and status 0, which the client uses for TLS errors and
    # requests it could not even build: neither fixes itself by waiting.
    return PermanentClusterError(message, status=status or None)


def classify_exception(exc: BaseException) -> ClusterError | None:
    """Map any exception raised by a client call to our kinds; None if it is not ours."""
    if isinstance(exc, ClusterError):
        return exc
    if isinstance(exc, ApiException):
        return classify_api_exception(exc)
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        # Only raised when someone configures retries; the reason is the real failure.
        return classify_exception(exc.reason) or TransientClusterError(str(exc))
    if isinstance(exc, urllib3.exceptions.SSLError):
        # A certificate the client does not trust will not become trusted by retrying.
        return PermanentClusterError(f"TLS error: {exc}")
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        # Timeouts, refused/reset connections, a server that hung up mid-response.
        # OSError covers ConnectionError, TimeoutError and socket errors leaking past urllib3.
        return TransientClusterError(f"{type(exc).__name__}: {exc}")
    return None


def _api_message(exc: ApiException) -> str:
    """The API server's own `Status.message` when there is one, else the HTTP reason."""
    body = exc.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            status = json.loads(body)
        except ValueError:
            status = None
        if isinstance(status, dict) and status.get("message"):
            return f"{exc.status} {exc.reason}: {status['message']}"
    return f"{exc.status} {exc.reason}"


@contextmanager
def _translated_errors() -> Iterator[None]:
    """Re-raise client, urllib3 and socket errors as `ClusterError` kinds."""
    try:
        yield
    except ClusterError:
        raise
    except Exception as exc:
        mapped = classify_exception(exc)
        if mapped is None:
            raise
        raise mapped from exc


def retry_transient(
    fn: Callable[[], _T],
    *,
    attempts: int = 5,
    backoff: float = 0.2,
    max_backoff: float = 5.0,
    sleep: Callable[[float], None] | None = None,
) -> _T:
    """Call `fn` until it stops raising `TransientClusterError`, at most `attempts` times.

    For short synchronous paths (a management command, a view that must answer now);
    Celery tasks use `autoretry_for` instead so a worker is not held while waiting.
    Permanent errors propagate on the first attempt: repeating them only adds load.
    """
    pause = sleep or time.sleep
    delay = backoff
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except TransientClusterError:
            if attempt == attempts:
                raise
            pause(delay)
            delay = min(delay * 2, max_backoff)
    raise AssertionError("unreachable")  # the loop either returns or raises


# --- kinds -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A resource type as the API addresses it; `group` is "" for the core API."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The `apiVersion` field of objects of this kind."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def is_core(self) -> bool:
        """Core kinds go through CoreV1Api, custom resources through CustomObjectsApi."""
        return self.group == ""

    @property
    def key(self) -> str:
        """`group/version/plural`, the spelling kmock and the test fixture use."""
        return f"{self.group}/{self.version}/{self.plural}" if self.group else (f"{self.version}/{self.plural}")


RAYSERVICE = Kind("ray.io", "v1", "rayservices", "RayService")
WORKLOAD = Kind("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")
CLUSTERQUEUE = Kind("kueue.x-k8s.io", "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False)
LOCALQUEUE = Kind("kueue.x-k8s.io", "v1beta2", "localqueues", "LocalQueue")
RESOURCEFLAVOR = Kind("kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False)
COHORT = Kind("kueue.x-k8s.io", "v1beta2", "cohorts", "Cohort", namespaced=False)
INFERENCESERVICE = Kind("serving.kserve.io", "v1beta1", "inferenceservices", "InferenceService")
NAMESPACE = Kind("", "v1", "namespaces", "Namespace", namespaced=False)
# Read only (listed to find a Ray cluster's pods for the metrics scrape); never written.
POD = Kind("", "v1", "pods", "Pod")

# Kueue's visibility API (an aggregated API served by the Kueue controller, not a CRD): the
# pending workloads of a ClusterQueue in admission order. Only the ClusterQueue view is read —
# it carries both positions (in the ClusterQueue and in the workload's LocalQueue), so one call
# per ClusterQueue answers every deployment queued in it. Its items (PendingWorkload, v1beta1)
# carry no pod sets, so the GPUs ahead of a deployment come from the Workloads the sweep lists.
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta1"
PENDING_WORKLOADS_PATH = f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}/clusterqueues/{{name}}/pendingworkloads"

KINDS: tuple[Kind, ...] = (
    RAYSERVICE,
    WORKLOAD,
    CLUSTERQUEUE,
    LOCALQUEUE,
    RESOURCEFLAVOR,
    COHORT,
    INFERENCESERVICE,
    NAMESPACE,
    POD,
)
_KINDS_BY_TYPE = {(k.api_version, k.kind): k for k in KINDS}


def kind_of(obj: Mapping[str, Any]) -> Kind:
    """The `Kind` of a manifest, from its `apiVersion` and `kind`."""
    try:
        return _KINDS_BY_TYPE[obj["apiVersion"], obj["kind"]]
    except KeyError:
        raise ValueError(
            f"unknown kind {obj.get('apiVersion')}/{obj.get('kind')}: add it to runtime.k8s.KINDS"
        ) from None


def labels_match(obj: Mapping[str, Any], selector: Mapping[str, str] | None) -> bool:
    """Whether `obj` carries every label in `selector` with the same value."""
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def _selector_string(selector: Mapping[str, str] | None) -> str | None:
    if not selector:
        return None
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items()))


# --- the cluster -----------------------------------------------------------------------------


class Cluster:
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
            if _core_namespace(kind):
                return self._call("get", self.core.read_namespace, name)
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
        if kind == POD:
            body = self._call(
                "list", self.core.list_namespaced_pod, _require_namespace(kind, namespace), label_selector=selector
            )
        elif kind.is_core:
            body = self._call("list", self.core.list_namespace, label_selector=selector)
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

        Raises NotFound when the ClusterQueue (or the visibility API) does not exist.
        """
        request = self.api_client.param_serialize(
            method="GET",
            resource_path=PENDING_WORKLOADS_PATH,
            path_params={"name": cluster_queue},
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
            if _core_namespace(kind):
                self._call("delete", self.core.delete_namespace, name)
            else:
                self._custom("delete", "delete", kind, namespace, name, propagation_policy="Background")
        except NotFound:
            return False
        return True

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

    def _call(self, verb: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one API call with our timeout; return the response body as a dict.

        `_preload_content=False` skips the client's model deserialisation: core calls would
        otherwise return models and custom-object create on a 200 answer returns None.
        """
        with self._calls_lock:
            self.calls[verb] += 1
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


def _core_namespace(kind: Kind) -> bool:
    """Whether a get/write goes to the core Namespace calls; the only other core kind, Pod, is
    list-only here (the portal never reads one pod or writes any)."""
    if kind == POD:
        raise ValueError("Pods are only listed by the portal (Cluster.list)")
    return kind.is_core


def _require_namespace(kind: Kind, namespace: str | None) -> str:
    if not namespace:
        raise ValueError(f"{kind.kind} is namespaced: pass a namespace")
    return namespace
