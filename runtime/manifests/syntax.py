"""What the Kubernetes API server accepts as a name, a label key or value, or a taint: one
definition each, so the values a person types are refused where they are typed (the model
validators in quotas.validators wrap these) and not later, by the API server or an operator.

The rules are k8s.io/apimachinery's (kubernetes/apimachinery v0.34.1,
pkg/util/validation/validation.go: IsDNS1123Label, IsDNS1123Subdomain, IsDNS1035Label,
IsQualifiedName, IsValidLabelValue) and the core API's taint effects (kubernetes/kubernetes
v1.34.1, pkg/apis/core/validation/validation.go: validateTaintEffect). tests/runtime/test_syntax.py
holds the boundary cases against what that code answers.

Each `*_problem` function returns why `value` is not that field (one sentence), or None. Patterns
are applied with `fullmatch`: `$` alone would let a trailing newline through. Pure: no Django.
"""

from __future__ import annotations

import re

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63
QUALIFIED_NAME_MAX = 63  # the name part of a label key (after the optional "<prefix>/")

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A DNS-1123 label that starts with a letter. KubeRay requires it of a RayService's name
# (ray-project/kuberay v1.6.2, ray-operator/controllers/ray/utils/validation.go,
# ValidateRayServiceMetadata: `7b-chat` is accepted by the API server and then marked
# Ready=False/ValidationFailed for good — tests/cluster/test_names.py), and KServe of an
# InferenceService's (its name becomes a Knative/Service name).
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Namespaces a tenant may not be given: Kubernetes' own, and (passed in by the caller) the
# platform's, such as the one holding every API-key Secret.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
SYSTEM_NAMESPACE_PREFIX = "kube-"


def _shown(value: object) -> str:
    return repr(value)[:80]


def dns1123_label_problem(value: object, max_length: int = DNS1123_LABEL_MAX) -> str | None:
    """A DNS-1123 label (a namespace, most object names): lowercase alphanumerics and '-'."""
    if not isinstance(value, str) or not value:
        return "Enter a name."
    if len(value) > max_length:
        return f"At most {max_length} characters (this one has {len(value)})."
    if not DNS1123_LABEL.fullmatch(value):
        return (
            "Use lowercase letters, digits and '-', starting and ending with a letter or digit "
            "(a Kubernetes DNS-1123 label)."
        )
    return None


def dns1035_label_problem(value: object, max_length: int = DNS1123_LABEL_MAX) -> str | None:
    """A DNS-1035 label: a DNS-1123 label that starts with a letter."""
    problem = dns1123_label_problem(value, max_length)
    if problem is None and not DNS1035_LABEL.fullmatch(value):  # type: ignore[arg-type]
        return "Start with a lowercase letter (KubeRay and KServe refuse names starting with a digit)."
    return problem


def dns1123_subdomain_problem(value: object) -> str | None:
    """A DNS-1123 subdomain (a Secret's or a ResourceFlavor's name, a label key's prefix): dot-separated
    DNS-1123 labels, at most 253 characters."""
    if not isinstance(value, str) or not value:
        return "Enter a name."
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        return f"At most {DNS1123_SUBDOMAIN_MAX} characters (this one has {len(value)})."
    if not DNS1123_SUBDOMAIN.fullmatch(value):
        return (
            "Use lowercase letters, digits, '-' and '.', each part between dots starting and ending "
            "with a letter or digit (a Kubernetes DNS-1123 subdomain)."
        )
    return None


def label_key_problem(key: object) -> str | None:
    """A label key (also a taint's and a toleration's key, a topology level): an optional DNS-1123
    subdomain prefix (≤ 253) and '/', then a name of ≤ 63 alphanumerics, '-', '_', '.' that
    starts and ends alphanumeric."""
    if not isinstance(key, str) or not key:
        return f"{_shown(key)} is not a label key: enter one."
    prefix, slash, name = key.partition("/")
    if not slash:
        prefix, name = "", key
    elif not prefix:
        return f"{_shown(key)} is not a label key: the prefix before '/' is empty."
    elif dns1123_subdomain_problem(prefix):
        return f"{_shown(key)} is not a label key: its prefix must be a lowercase DNS name of at most 253 characters."
    if len(name) > QUALIFIED_NAME_MAX:
        return f"{_shown(key)} is not a label key: the name after the prefix has more than 63 characters."
    if not QUALIFIED_NAME.fullmatch(name):
        return (
            f"{_shown(key)} is not a label key (an optional DNS prefix and '/', then letters, digits, "
            "'-', '_', '.' starting and ending with a letter or digit)."
        )
    return None


def label_value_problem(value: object) -> str | None:
    """A label value (also a taint's and a toleration's value): empty, or ≤ 63 alphanumerics, '-',
    '_', '.' that start and end alphanumeric."""
    if not isinstance(value, str):
        return f"{_shown(value)} is not a label value: it must be text."
    if len(value) > LABEL_VALUE_MAX or not LABEL_VALUE.fullmatch(value):
        return (
            f"{value[:70]!r} is not a label value (≤ 63 characters: letters, digits, '-', '_', '.', "
            "starting and ending with a letter or digit)."
        )
    return None


def taint_effect_problem(effect: object) -> str | None:
    """A taint's (and a toleration's) effect."""
    if effect not in TAINT_EFFECTS:
        return f"effect {_shown(effect)} is not one of {', '.join(TAINT_EFFECTS)}."
    return None


def tenant_namespace_problem(name: str, platform_namespaces: frozenset[str] | set[str]) -> str | None:
    """Why `name` cannot be a tenant's own namespace although it is a valid name: Kubernetes'
    namespaces (`default`, `kube-*`) and the platform's (`platform_namespaces`, e.g. the one
    that holds every API-key Secret) belong to no tenant."""
    if name in SYSTEM_NAMESPACES or name.startswith(SYSTEM_NAMESPACE_PREFIX):
        return f"{name!r} is a Kubernetes system namespace ('default', 'kube-*'); choose another slug."
    if name in platform_namespaces:
        return f"{name!r} is a namespace of the platform itself; choose another slug."
    return None
