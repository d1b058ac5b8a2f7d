"""Karpenter objects for GPU flavors the portal provisions: a NodePool (karpenter.sh/v1) per
flavor and, on AWS, the EC2NodeClass (karpenter.k8s.aws/v1) it names.

Pure like the rest of `runtime.manifests`: functions of frozen specs, no ORM, no I/O.
`quotas.nodepools` applies what these return.

Why the pool's nodes and the flavor's ResourceFlavor agree: Kueue pins a GPU pod set to a
flavor through the flavor's node labels (and injects its tolerations on admission), so the
nodes Karpenter makes for that pod must carry exactly those labels and only taints the pod
tolerates. The labels are the flavor's own plus `llm-portal.io/flavor: <flavor>`, the one label
the portal's pods select (common.flavor_node_labels); Karpenter also treats a template label as
a requirement, so a pod pending on that label is provisioned by this pool only. Each node label
becomes either a requirement (labels Karpenter or the cloud provider set from the instance
itself, e.g. `node.kubernetes.io/instance-type`: a template label there is refused) or a
template label (every other key, put on the node as written). The nodes are tainted
`nvidia.com/gpu:NoSchedule`, which the portal's GPU pods tolerate and Ray heads do not, and each
toleration of the flavor with a key becomes a taint too, so only pods Kueue admitted into the
flavor land on its nodes.

Disruption: a node serving a model is never taken away by Karpenter on its own initiative
(reloading weights costs minutes of serving). Three parts, read from kubernetes-sigs/karpenter
v1.14.1:
- `consolidationPolicy: WhenEmpty`: an empty node is removed `consolidate_after` after its last
  pod left, plus up to 25 s of Karpenter's own (pkg/controllers/disruption: a 10 s poll,
  controller.go pollingPeriod, and a 15 s wait before it checks the node is still empty,
  consolidation.go commandValidationDelay); a busy one is never drained to pack pods tighter;
- `budgets`: no node is disrupted for the reasons `Drifted` or `Underutilized` (`nodes: "0"`;
  pkg/apis/v1/nodepool.go GetAllowedDisruptionsByReason takes the smallest budget naming the
  reason, so `Empty`, named by none, stays unlimited). A changed AMI or template reaches new
  nodes at once and the old ones when they empty or expire. The pool's hash covers its template
  but the requirements (nodepool.go NodePool.Hash), so a flavor's changed labels or tolerations
  and a changed `expire_after` mark every node of the pool Drifted as well, and the budget keeps
  them (tests/cluster/test_karpenter.py); limits and the disruption block are outside the hash.
  This also covers serving pods started before they carried the annotation below (running Ray
  clusters keep their pods);
- the serving pods carry `karpenter.sh/do-not-disrupt: "true"` (`serving_pod_annotations`;
  pkg/apis/v1/labels.go DoNotDisruptAnnotationKey): a node with such a pod is no candidate for
  any voluntary disruption (pkg/controllers/state/statenode.go ValidatePodsDisruptable) and the
  terminator never evicts it (pkg/utils/pod/scheduling.go IsEvictable). Only Karpenter reads
  the annotation: stopping a deployment deletes its pods through their controllers as before.
`expireAfter` is forceful (pkg/controllers/nodeclaim/expiration): an expired node is tainted
`karpenter.sh/disrupted` and drained, but its drain waits for the do-not-disrupt pods
(IsDrainable), so it goes once the deployments on it stop; the pool sets no
terminationGracePeriod, which would delete them at a deadline.

On AWS the EC2NodeClass selects its AMI by a pinned alias (`ami_alias_problem`): `@latest`
drifts every node on each AMI release, so it needs an explicit opt-in.

The NVIDIA device plugin's DaemonSet must run on the pool's nodes, or they report no
`nvidia.com/gpu` at all: `device_plugin_untolerated` names the pool's taints its default
tolerations do not cover (a warning on the flavor; the platform team may have added them).
"""

from __future__ import annotations

import re
from typing import Any

from runtime.manifests.common import GPU_RESOURCE, GPU_TAINT_KEY, flavor_node_labels, portal_labels
from runtime.spec import NodeClassSpec, NodePoolSpec, Toleration

KARPENTER_API_VERSION = "karpenter.sh/v1"
EC2_API_VERSION = "karpenter.k8s.aws/v1"

LABEL_NODEPOOL = "karpenter.sh/nodepool"
LABEL_CAPACITY_TYPE = "karpenter.sh/capacity-type"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_GPU_MANUFACTURER = "karpenter.k8s.aws/instance-gpu-manufacturer"
LABEL_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"

# Labels Karpenter (or its AWS provider) derives from the instance: a NodePool may require them,
# never set them as template labels (Karpenter refuses labels in its restricted domains).
WELL_KNOWN_LABELS = frozenset(
    {
        LABEL_INSTANCE_TYPE,
        LABEL_CAPACITY_TYPE,
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "node.kubernetes.io/windows-build",
    }
)
WELL_KNOWN_PREFIXES = ("karpenter.k8s.aws/",)
# Label domains Karpenter keeps for itself or for Kubernetes: a node label there that is not
# well known can be neither required nor set (quotas.provisioning refuses such a flavor).
RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io", "karpenter.sh", "karpenter.k8s.aws")
# Karpenter's own exceptions inside those domains: labels there may be set on a node template.
DOMAIN_EXCEPTIONS = ("kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io")


# Voluntary disruption never touches a node with a pod annotated so (module docstring).
ANNOTATION_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
# Never for drift or to pack tighter; empty nodes go (module docstring). Budgets are not part of
# the NodePool's drift hash (`hash:"ignore"`), so changing them replaces no node.
DISRUPTION_BUDGETS = (("0", ("Drifted", "Underutilized")),)  # (nodes, reasons)

# EC2NodeClass amiSelectorTerms[].alias (aws/karpenter-provider-aws v1.14.1, pkg/apis/v1/
# ec2nodeclass.go and its CRD's CEL rules): "family@version", at most 30 characters. A pinned
# version is the AMI release the family's SSM parameter names (pkg/providers/amifamily/al2023.go:
# amazon-eks-node-al2023-<arch>-<variant>-<k8s>-<version>, e.g. v20240807; bottlerocket.go drops
# a leading "v" of 1.10.0). Windows families take only "latest" and run none of the portal's pods.
AMI_VERSIONS = {
    "al2023": re.compile(r"v\d{8}"),
    "al2": re.compile(r"v\d{8}"),
    "bottlerocket": re.compile(r"v?\d+\.\d+\.\d+"),
}
AMI_ALIAS_MAX = 30
AMI_LATEST = "latest"
AMI_EXAMPLE = "al2023@v20240807"

# The NVIDIA device plugin DaemonSet's tolerations as shipped (NVIDIA/k8s-device-plugin v0.20.0,
# deployments/helm/nvidia-device-plugin/values.yaml `tolerations`; the static
# deployments/static/nvidia-device-plugin.yml has only the second). A node taint outside them
# keeps the plugin off the node, which then reports no nvidia.com/gpu.
DEVICE_PLUGIN_TOLERATIONS = (
    Toleration(key="CriticalAddonsOnly", operator="Exists", effect=""),
    Toleration(key=GPU_TAINT_KEY, operator="Exists", effect="NoSchedule"),
)


def serving_pod_annotations() -> dict[str, str]:
    """Annotations of every pod that serves a model (Ray head and workers, KServe predictor)."""
    return {ANNOTATION_DO_NOT_DISRUPT: "true"}


def ami_alias_problem(alias: str, *, allow_latest: bool) -> str | None:
    """Why the EC2NodeClass may not use `alias` (None: it may): the CRD's rules, a version in
    the family's release format, and `latest` only with the opt-in."""
    family, sep, version = alias.partition("@")
    if not alias:
        return f"not set: pin an AMI release, e.g. {AMI_EXAMPLE}."
    if len(alias) > AMI_ALIAS_MAX or not sep or family not in AMI_VERSIONS:
        return (
            f"{alias[:40]!r} is not an AMI alias: family@version (at most {AMI_ALIAS_MAX} characters), family one "
            f"of {', '.join(AMI_VERSIONS)}, e.g. {AMI_EXAMPLE}."
        )
    if version == AMI_LATEST:
        if allow_latest:
            return None
        return (
            f"{alias!r}: @latest replaces every GPU node on each AMI release (Karpenter drift); pin a release, "
            f"e.g. {AMI_EXAMPLE}, or set KARPENTER_AMI_ALLOW_LATEST=true."
        )
    if not AMI_VERSIONS[family].fullmatch(version):
        example = "v1.10.0" if family == "bottlerocket" else "v20240807"
        return f"{alias!r}: {family} AMI releases are named like {family}@{example}."
    return None


def _tolerates(toleration: Toleration, taint: dict[str, Any]) -> bool:
    """Kubernetes' rule for Equal and Exists (k8s.io/api core/v1/toleration.go ToleratesTaint):
    an empty effect or key matches any, Exists any value."""
    if toleration.effect and toleration.effect != taint["effect"]:
        return False
    if toleration.key and toleration.key != taint["key"]:
        return False
    return toleration.operator == "Exists" or toleration.value == taint.get("value", "")


def device_plugin_untolerated(spec: NodePoolSpec) -> list[dict[str, Any]]:
    """The pool's taints that keep the NVIDIA device plugin off its nodes as shipped
    (PreferNoSchedule only prefers, so it never does)."""
    return [
        taint
        for taint in _taints(spec)
        if taint["effect"] != "PreferNoSchedule" and not any(_tolerates(t, taint) for t in DEVICE_PLUGIN_TOLERATIONS)
    ]


def is_well_known(key: str) -> bool:
    """Whether Karpenter sets `key` from the instance (a requirement, not a template label)."""
    return key in WELL_KNOWN_LABELS or key.startswith(WELL_KNOWN_PREFIXES)


def is_restricted(key: str) -> bool:
    """Whether `key` lies in a label domain Karpenter refuses as a template label."""
    domain = key.split("/", 1)[0] if "/" in key else ""

    def within(domains: tuple[str, ...]) -> bool:
        return any(domain == d or domain.endswith("." + d) for d in domains)

    return within(RESTRICTED_DOMAINS) and not within(DOMAIN_EXCEPTIONS)


def nodepool_name(flavor_name: str) -> str:
    """The NodePool (and EC2NodeClass) of a flavor has the flavor's name: one pool per flavor."""
    return flavor_name


def _requirement(key: str, values: list[str] | tuple[str, ...]) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def _requirements(spec: NodePoolSpec, node_class: NodeClassSpec) -> list[dict[str, Any]]:
    """What a node must be: the flavor's GPUs, instance types, capacity types, well-known labels."""
    flavor = spec.flavor
    labels = flavor_node_labels(flavor)
    requirements = []
    if node_class.aws:
        # AWS publishes both per instance type, so this alone keeps out non-GPU instances and
        # instances with another number of GPUs than the flavor's node size (which the quota,
        # TP limits and Kueue's topology all assume).
        requirements.append(_requirement(LABEL_GPU_MANUFACTURER, ["nvidia"]))
        requirements.append(_requirement(LABEL_GPU_COUNT, [str(flavor.gpus_per_node)]))
    if spec.instance_types:
        requirements.append(_requirement(LABEL_INSTANCE_TYPE, spec.instance_types))
    requirements.append(_requirement(LABEL_CAPACITY_TYPE, spec.capacity_types))
    taken = {r["key"] for r in requirements}
    for key, value in sorted(labels.items()):
        if is_well_known(key) and key not in taken:
            requirements.append(_requirement(key, [value]))
    return requirements


def _taints(spec: NodePoolSpec) -> list[dict[str, Any]]:
    """The GPU taint, then a taint per keyed toleration of the flavor: its nodes take only pods
    Kueue admitted into the flavor (a toleration with no key tolerates everything and makes no
    taint). One taint per (key, effect), as the API server requires of a node; the flavor's own
    wins (the GPU pods tolerate `nvidia.com/gpu` with any value)."""
    taints: dict[tuple[str, str], dict[str, Any]] = {}
    for toleration in spec.flavor.tolerations:
        if not toleration.key:
            continue
        taint: dict[str, Any] = {"key": toleration.key, "effect": toleration.effect}
        if toleration.operator == "Equal" and toleration.value:
            taint["value"] = toleration.value
        taints.setdefault((toleration.key, toleration.effect), taint)
    gpu = {(GPU_TAINT_KEY, "NoSchedule"): {"key": GPU_TAINT_KEY, "effect": "NoSchedule"}}
    return list({**gpu, **taints}.values())


def _node_class_ref(spec: NodePoolSpec, node_class: NodeClassSpec) -> dict[str, str]:
    if node_class.aws:
        return {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodepool_name(spec.flavor.name)}
    name = spec.node_class_name or node_class.name
    if not name:
        raise ValueError(
            f"NodePool {spec.flavor.name!r}: no node class named (set KARPENTER_NODE_CLASS_NAME or the "
            "flavor's provisioning node_class)"
        )
    return {"group": node_class.group, "kind": node_class.kind, "name": name}


def render_nodepool(spec: NodePoolSpec, node_class: NodeClassSpec) -> dict[str, Any]:
    """The NodePool for one provisioned GPU flavor (the module docstring says why each part)."""
    labels = {k: v for k, v in flavor_node_labels(spec.flavor).items() if not is_well_known(k)}
    template: dict[str, Any] = {
        "spec": {
            "nodeClassRef": _node_class_ref(spec, node_class),
            "requirements": _requirements(spec, node_class),
            "expireAfter": spec.expire_after,
        }
    }
    template["spec"]["taints"] = _taints(spec)
    template["metadata"] = {"labels": labels}
    return {
        "apiVersion": KARPENTER_API_VERSION,
        "kind": "NodePool",
        "metadata": {"name": nodepool_name(spec.flavor.name), "labels": portal_labels()},
        "spec": {
            "template": template,
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": spec.consolidate_after,
                "budgets": [{"nodes": nodes, "reasons": list(reasons)} for nodes, reasons in DISRUPTION_BUDGETS],
            },
            # Whole GPUs of node capacity; quotas.nodepools derives it from the quotas granted.
            "limits": {GPU_RESOURCE: spec.gpu_limit},
        },
    }


def _selector_terms(tags: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    return [{"tags": dict(tags)}]


def render_ec2nodeclass(flavor_name: str, node_class: NodeClassSpec) -> dict[str, Any]:
    """The EC2NodeClass a provisioned flavor's NodePool names (AWS only).

    One per flavor, all alike today, so a flavor's nodes can later get their own disk or AMI
    without touching another pool. Raises ValueError when the platform settings are missing.
    """
    if not (node_class.role and node_class.subnet_tags and node_class.security_group_tags):
        raise ValueError(
            "EC2NodeClass needs KARPENTER_NODE_ROLE, KARPENTER_SUBNET_TAGS and KARPENTER_SECURITY_GROUP_TAGS"
        )
    if problem := ami_alias_problem(node_class.ami_alias, allow_latest=node_class.ami_allow_latest):
        raise ValueError(f"EC2NodeClass: KARPENTER_AMI_ALIAS {problem}")
    return {
        "apiVersion": EC2_API_VERSION,
        "kind": "EC2NodeClass",
        "metadata": {"name": nodepool_name(flavor_name), "labels": portal_labels()},
        "spec": {
            "role": node_class.role,
            "amiSelectorTerms": [{"alias": node_class.ami_alias}],
            "subnetSelectorTerms": _selector_terms(node_class.subnet_tags),
            "securityGroupSelectorTerms": _selector_terms(node_class.security_group_tags),
            "blockDeviceMappings": [
                {
                    "deviceName": "/dev/xvda",
                    "rootVolume": True,
                    "ebs": {"volumeSize": f"{node_class.root_volume_gib}Gi", "volumeType": "gp3", "encrypted": True},
                }
            ],
        },
    }
