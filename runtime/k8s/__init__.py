"""The cluster layer: the only package in the project that imports `kubernetes`.

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

from runtime.k8s.cluster import DEFAULT_TIMEOUT_SECONDS, FIELD_MANAGER, Cluster
from runtime.k8s.errors import (
    ClusterError,
    NotFound,
    PermanentClusterError,
    TransientClusterError,
    classify_api_exception,
    classify_exception,
    retry_transient,
)
from runtime.k8s.kinds import (
    AUTHPOLICY,
    CLUSTERQUEUE,
    COHORT,
    CONFIGMAP,
    EVENT,
    HTTPROUTE,
    INFERENCESERVICE,
    KINDS,
    LOCALQUEUE,
    NAMESPACE,
    NODE,
    PENDING_WORKLOADS_PATH,
    POD,
    PVC,
    RATELIMITPOLICY,
    RAYCLUSTER,
    RAYSERVICE,
    RESOURCEFLAVOR,
    SECRET,
    TELEMETRYPOLICY,
    TOKENRATELIMITPOLICY,
    VISIBILITY_GROUP,
    VISIBILITY_VERSION,
    WORKLOAD,
    WORKLOADPRIORITYCLASS,
    Kind,
    kind_of,
    labels_match,
)

__all__ = [
    "AUTHPOLICY",
    "CLUSTERQUEUE",
    "COHORT",
    "WORKLOADPRIORITYCLASS",
    "CONFIGMAP",
    "EVENT",
    "DEFAULT_TIMEOUT_SECONDS",
    "FIELD_MANAGER",
    "HTTPROUTE",
    "INFERENCESERVICE",
    "KINDS",
    "LOCALQUEUE",
    "NAMESPACE",
    "NODE",
    "PENDING_WORKLOADS_PATH",
    "POD",
    "PVC",
    "RATELIMITPOLICY",
    "RAYCLUSTER",
    "RAYSERVICE",
    "RESOURCEFLAVOR",
    "SECRET",
    "TOKENRATELIMITPOLICY",
    "TELEMETRYPOLICY",
    "VISIBILITY_GROUP",
    "VISIBILITY_VERSION",
    "WORKLOAD",
    "Cluster",
    "ClusterError",
    "Kind",
    "NotFound",
    "PermanentClusterError",
    "TransientClusterError",
    "classify_api_exception",
    "classify_exception",
    "kind_of",
    "labels_match",
    "retry_transient",
]
