"""Readiness of the install itself (runtime.readiness runs these with its other checks): the API
server's version, whether Kueue runs and at which version, the versions of KubeRay and KServe,
GPU quota against the GPUs the nodes have, the CPU flavor's node labels, and — when Kueue's
ConfigMap cannot be found — whether Kueue manages RayServices, asked of its webhook instead.

Versions are judged by runtime.versions (the one version matrix). Two probes are dry-run creates
(`dryRun=All`: admission runs, nothing is stored, no controller sees the object), so they prove
what a configuration file cannot: that the webhook answers and what it does.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from runtime import k8s
from runtime.backends import traits as backend_traits
from runtime.k8s.kinds import CRD, DEPLOYMENT
from runtime.manifests.common import GPU_RESOURCE
from runtime.readiness_base import AMBER, GREEN, RED, VERDICT_STATUS, Check, ReadinessConfig, cannot_read, denied
from runtime.versions import check as check_version

# Kueue's ResourceFlavor webhook adds this finalizer on create (kubernetes-sigs/kueue
# pkg/webhooks/resourceflavor_webhook.go, Default; mresourceflavor.kb.io, failurePolicy Fail in
# config/components/webhook/manifests.yaml at v0.19.2).
IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PROBE_PREFIX = "llm-portal-readiness-"
VERSION_LABEL = "app.kubernetes.io/version"


def check_server_version(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    found = cluster.server_version().get("gitVersion")
    level, message = check_version("kubernetes", found)
    fix = "" if level == "ok" else "Run a Kubernetes version Kueue supports (runtime/versions.py)."
    return [Check("version:kubernetes", "Kubernetes API server", VERDICT_STATUS.get(level, AMBER), message, fix)]


def image_version(deployment: dict[str, Any]) -> str | None:
    """The version label of a controller's Deployment, else its first image's tag."""
    labels = (deployment.get("metadata") or {}).get("labels") or {}
    if labels.get(VERSION_LABEL):
        return labels[VERSION_LABEL]
    containers = ((((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []
    image = (containers[0].get("image") or "") if containers else ""
    name = image.split("@")[0].rsplit("/", 1)[-1]
    return name.partition(":")[2] or None


def kueue_webhook(cluster: k8s.Cluster) -> tuple[str, str]:
    """(status, sentence): does Kueue's webhook answer? A dry-run ResourceFlavor comes back with
    Kueue's finalizer only if it did; with failurePolicy Fail, a Kueue that is down makes the
    create fail (and with it every job create in tenant namespaces)."""
    probe = {
        "apiVersion": k8s.RESOURCEFLAVOR.api_version,
        "kind": "ResourceFlavor",
        "metadata": {"generateName": PROBE_PREFIX},
        "spec": {},
    }
    try:
        answer = cluster.dry_run_create(k8s.RESOURCEFLAVOR, probe)
    except k8s.NotFound:
        return RED, "Its ResourceFlavor API is not served."
    except k8s.PermanentClusterError as error:
        if denied(error):
            return AMBER, f"Cannot try its webhook (dry-run create of a ResourceFlavor): {error}."
        return RED, f"Its webhook refused a dry-run ResourceFlavor: {error}."
    except k8s.TransientClusterError as error:
        # Kueue registers a webhook for every job framework, a no-op one for those not enabled,
        # all failurePolicy Fail (config/components/webhook/manifests.yaml at v0.19.2): seen on the
        # real plane, a KServe predictor's Deployment was refused as well as every RayService.
        return RED, (
            f"Its webhook does not answer (a dry-run ResourceFlavor failed: {error}). Until it does, the API "
            "server refuses every RayService, and every Deployment in tenant namespaces (KServe "
            "predictors), whether or not that integration is on."
        )
    if IN_USE_FINALIZER in ((answer.get("metadata") or {}).get("finalizers") or []):
        return GREEN, "Its webhook answers."
    return RED, "Its webhooks are not configured: a dry-run ResourceFlavor came back without its finalizer."


def check_kueue_controller(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    """Kueue's version from its Deployment (when present and readable), and whether it runs: the
    Deployment's available replicas, and its webhook answering a dry-run create."""
    key, title = "controller:kueue", "Kueue controller"
    namespace, name = config.kueue_config[0], config.kueue_deployment
    webhook, said = kueue_webhook(cluster)
    parts, statuses = [said], [webhook]
    found = None
    try:
        deployment = cluster.get(DEPLOYMENT, name, namespace)
    except k8s.PermanentClusterError as error:
        if not denied(error):
            raise
        deployment = None
        parts.append(f"Cannot read Deployment {namespace}/{name} for its version ({error}).")
    else:
        if deployment is None:
            parts.append(f"No Deployment {namespace}/{name} to read its version from.")
    if deployment is not None:
        found = image_version(deployment)
        status = deployment.get("status") or {}
        available, wanted = int(status.get("availableReplicas") or 0), int(status.get("replicas") or 0)
        parts.append(f"Deployment {namespace}/{name}: {available} of {wanted} replica(s) available.")
        statuses.append(GREEN if available else RED)
    level, message = check_version("kueue", found)
    parts.insert(0, message)
    statuses.append(VERDICT_STATUS.get(level, AMBER))
    status = RED if RED in statuses else AMBER if AMBER in statuses else GREEN
    fix = {
        GREEN: "",
        AMBER: f"Check Kueue's version against runtime/versions.py; apply the optional grant ({name}).",
        RED: f"Start Kueue (Deployment {namespace}/{name}) at a supported version, with its webhooks.",
    }[status]
    return [Check(key, title, status, " ".join(parts), fix)]


def check_backend_versions(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    """KubeRay's and KServe's versions, from the `app.kubernetes.io/version` label of their CRD
    (an install that labels it; the upstream CRD files carry none: then "unknown")."""
    groups = cluster.api_groups()
    checks = []
    for backend in config.backends:
        kind = backend_traits(backend).kind
        if kind is None or not kind.component or kind.group not in groups:
            continue  # off the cluster, no version to judge, or check_apis already says it is not installed
        product, crd = kind.product, kind.crd
        key, title = f"controller:{backend}", f"{product} version"
        try:
            found = cluster.get(CRD, crd)
        except k8s.PermanentClusterError as error:
            if not denied(error):
                raise
            checks.append(cannot_read(key, title, error))
            continue
        labels = ((found or {}).get("metadata") or {}).get("labels") or {}
        level, message = check_version(kind.component, labels.get(VERSION_LABEL))
        where = f"CRD {crd} present" if found else f"CRD {crd} not found"
        fix = "" if level == "ok" else f"Install the {product} version runtime/versions.py names."
        if not labels.get(VERSION_LABEL):
            fix = f"Label CRD {crd} with {VERSION_LABEL} (the installed release) so its version can be checked."
        checks.append(Check(key, title, VERDICT_STATUS.get(level, AMBER), f"{where}. {message}", fix))
    return checks


def _gpus(quantity: Any) -> int:
    try:
        return int(str(quantity or 0))
    except ValueError:
        return 0


def _node_gpus(node: dict[str, Any]) -> int:
    return _gpus(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE))


def nominal_gpus(cluster_queues: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{flavor: {ClusterQueue: nominal nvidia.com/gpu}} for every flavor the queues name."""
    quota: dict[str, dict[str, int]] = defaultdict(dict)
    for cq in cluster_queues:
        for group in (cq.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                gpus = sum(
                    _gpus(r.get("nominalQuota")) for r in flavor.get("resources") or [] if r.get("name") == GPU_RESOURCE
                )
                quota[flavor.get("name")][cq["metadata"]["name"]] = gpus
    return quota


def check_quota_capacity(cluster: k8s.Cluster, config: ReadinessConfig) -> list[Check]:
    """Per ResourceFlavor the ClusterQueues name: nominal GPU quota against the allocatable GPUs of
    the nodes carrying its nodeLabels (amber when larger: admitted deployments wait for nodes),
    and for a CPU flavor (no GPU quota) whether it has nodeLabels at all."""
    try:
        queues = cluster.list(k8s.CLUSTERQUEUE)
        flavors = {f["metadata"]["name"]: f for f in cluster.list(k8s.RESOURCEFLAVOR)}
        nodes = cluster.list(k8s.NODE)
    except k8s.PermanentClusterError as error:
        if not denied(error):
            raise
        return [cannot_read("quota", "GPU quota against node capacity", error)]
    checks = []
    for name, per_queue in sorted(nominal_gpus(queues).items()):
        labels = ((flavors.get(name) or {}).get("spec") or {}).get("nodeLabels") or {}
        nominal = sum(per_queue.values())
        if name not in flavors:
            detail = f"ClusterQueues {', '.join(sorted(per_queue))} name ResourceFlavor {name}, which does not exist."
            fix = "Kueue admits nothing through a missing flavor: sync the quotas (or remove the flavor)."
            checks.append(Check(f"quota:{name}", f"Flavor {name}", RED, detail, fix))
            continue
        if nominal == 0:
            checks.append(_cpu_flavor(name, labels))
            continue
        own = [n for n in nodes if k8s.labels_match(n, labels) and _node_gpus(n)]
        capacity = sum(_node_gpus(n) for n in own)
        queues_said = ", ".join(f"{q} {g}" for q, g in sorted(per_queue.items()) if g)
        detail = f"{nominal} nominal {GPU_RESOURCE} ({queues_said}); {capacity} allocatable on {len(own)} node(s)."
        key, title = f"quota:{name}", f"GPU quota of flavor {name}"
        if nominal <= capacity:
            checks.append(Check(key, title, GREEN, detail))
        elif name in config.pools:
            checks.append(Check(key, title, GREEN, detail + " Karpenter adds nodes for admitted deployments."))
        else:
            fix = "Add nodes, or lower the flavor's quotas: Kueue admits up to the quota, then pods stay Pending."
            checks.append(Check(key, title, AMBER, detail + f" {nominal - capacity} GPU(s) have no node.", fix))
    return checks


def _cpu_flavor(name: str, labels: dict[str, str]) -> Check:
    key, title = f"cpuflavor:{name}", f"CPU flavor {name}"
    if labels:
        return Check(key, title, GREEN, "Node labels: " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())))
    return Check(
        key,
        title,
        AMBER,
        "No GPU quota and no node labels: Ray heads may land on GPU nodes.",
        "Set KUEUE_CPU_NODE_LABELS to the CPU nodes' labels.",
    )


def rayservice_probe(cluster: k8s.Cluster, config: ReadinessConfig) -> tuple[str, str]:
    """(status, sentence) when Kueue's ConfigMap cannot be read: a dry-run RayService with a
    queue name comes back suspended only if ray.io/rayservice is enabled — a disabled integration
    gets a no-op webhook at the same path (kubernetes-sigs/kueue pkg/controller/jobframework
    setup.go, noop.SetupWebhook; pkg/controller/jobs/rayservice/rayservice_webhook.go Default →
    ApplyDefaultForSuspend suspends a job that has a queue name)."""
    if not config.namespaces:
        return AMBER, "No tenant namespace to try a dry-run RayService in."
    probe = {
        "apiVersion": k8s.RAYSERVICE.api_version,
        "kind": "RayService",
        "metadata": {
            "generateName": PROBE_PREFIX,
            "namespace": config.namespaces[0],
            "labels": {QUEUE_LABEL: "llm-portal-readiness"},
        },
        "spec": {
            "rayClusterConfig": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray"}]}},
                }
            }
        },
    }
    try:
        answer = cluster.dry_run_create(k8s.RAYSERVICE, probe)
    except k8s.ClusterError as error:
        return AMBER, f"A dry-run RayService could not confirm it either: {error}."
    if ((answer.get("spec") or {}).get("rayClusterConfig") or {}).get("suspend") is True:
        return GREEN, "Confirmed another way: Kueue's webhook suspended a dry-run RayService with a queue name."
    return RED, "Kueue's webhook left a dry-run RayService with a queue name unsuspended: it would run unqueued."
