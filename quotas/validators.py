"""Validators for names and values that end up in Kubernetes objects: Django's face of the
syntax rules in runtime.manifests.syntax (one definition each), used by the model fields and
`clean()` methods so the forms, the API serializers and the admin refuse the same values with
the same field messages."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError

from runtime.manifests import syntax
from runtime.manifests.common import LABEL_DOMAIN, LABEL_FLAVOR, MAX_OWN_NODE_LABELS
from runtime.manifests.syntax import DNS1123_LABEL  # noqa: F401 (the tenant serializer's pattern)

TENANT_SLUG_MAX = 40  # "tenant-<slug>" names the ClusterQueue; the slug is also the Namespace


def _refuse(problem: str | None, code: str) -> None:
    if problem:
        raise ValidationError(problem, code=code)


def validate_dns1123_label(value: str, max_length: int = syntax.DNS1123_LABEL_MAX) -> None:
    """A DNS-1123 label: lowercase letters, digits and '-', starts and ends alphanumeric."""
    _refuse(syntax.dns1123_label_problem(value, max_length), "dns1123")


def validate_storage_class(value: str) -> None:
    """A StorageClass name (a DNS-1123 subdomain); empty means the platform's setting."""
    if value:
        _refuse(syntax.dns1123_subdomain_problem(value), "storage_class")


def validate_dns1035_label(value: str) -> None:
    """A DNS-1035 label (what KubeRay and KServe require of their objects' names): a DNS-1123
    label that starts with a letter."""
    _refuse(syntax.dns1035_label_problem(value), "dns1035")


def validate_label_value(value: str) -> None:
    """A Kubernetes label value (≤ 63 chars, alphanumerics, '-', '_', '.')."""
    _refuse(syntax.label_value_problem(value), "label_value")


def platform_namespaces() -> frozenset[str]:
    """The namespaces the platform itself uses (configured): none of them may become a tenant's."""
    return frozenset({settings.API_KEY_NAMESPACE, settings.GATEWAY_NAMESPACE, settings.KUEUE_CONFIG_NAMESPACE} - {""})


def validate_tenant_slug(value: str) -> None:
    """A tenant's slug names its Namespace, its LocalQueue, its ClusterQueue (`tenant-<slug>`), its
    key files and the labels on its keys' Secrets: a DNS-1123 label of at most 40 characters that
    is not a namespace of Kubernetes or of the platform (a tenant named after the API-key
    namespace would own every key's Secret)."""
    _refuse(syntax.dns1123_label_problem(value, TENANT_SLUG_MAX), "dns1123")
    _refuse(syntax.tenant_namespace_problem(value, platform_namespaces()), "reserved")


def validate_flavor_name(value: str) -> None:
    """A GPU flavor's name names its ResourceFlavor, NodePool, Topology and the llm-portal.io/flavor
    value its pods select: a DNS-1123 label that is not the platform's CPU flavor (whose
    ResourceFlavor it would overwrite, putting Ray heads on GPU nodes)."""
    validate_dns1123_label(value)
    if value == settings.KUEUE_CPU_FLAVOR:
        raise ValidationError(
            f"{value!r} is the platform's CPU flavor (KUEUE_CPU_FLAVOR), where Ray heads run; choose another name.",
            code="reserved",
        )


def _node_label_problem(key: object, value: object) -> str | None:
    """Why one node label cannot go on a ResourceFlavor (and a node), or None."""
    problem = syntax.label_key_problem(key)
    if problem:
        return problem
    prefix = key.rpartition("/")[0]  # type: ignore[union-attr]
    if prefix == LABEL_DOMAIN or prefix.endswith("." + LABEL_DOMAIN):
        return f"{key!r} is in the portal's label domain; the portal sets {LABEL_FLAVOR}=<flavor name> itself."
    if isinstance(value, (dict, list)):
        return f"{key!r}: nested values are not node labels; write each label as one key and one text value."
    if not isinstance(value, str):
        return f"{key!r}: the value must be text (quote numbers and true/false)."
    problem = syntax.label_value_problem(value)
    return f"{key!r}: {problem}" if problem else None


def validate_node_labels(value: object) -> None:
    """A flavor's own node labels: a flat object of label keys and text values, at most
    MAX_OWN_NODE_LABELS, none in the portal's domain (it adds llm-portal.io/flavor itself, and a
    ResourceFlavor holds 8 labels). One message per problem."""
    if not isinstance(value, dict):
        raise ValidationError("Node labels must be an object of label keys and text values.", code="invalid")
    if len(value) > MAX_OWN_NODE_LABELS:
        raise ValidationError(
            f"At most {MAX_OWN_NODE_LABELS} node labels (a ResourceFlavor holds {MAX_OWN_NODE_LABELS + 1}, "
            f"one of them {LABEL_FLAVOR}).",
            code="max_length",
        )
    messages = [problem for key, label in value.items() if (problem := _node_label_problem(key, label))]
    if messages:
        raise ValidationError(messages, code="node_label")


TOLERATION_OPERATORS = ("Equal", "Exists")
TOLERATION_FIELDS = frozenset({"key", "operator", "value", "effect"})
MAX_TOLERATIONS = 8  # the ResourceFlavor CRD's maxItems


def _toleration_problems(toleration: object) -> list[str]:
    """What the Kueue ResourceFlavor CRD (schema + CEL rules) and then the pods Kueue copies the
    toleration into (the core API's ValidateTolerations: key a label key, value a label value)
    would refuse in one toleration.

    Absent fields take the portal's defaults (operator Equal, effect NoSchedule: see
    quotas.specs), so only fields that are present are checked against the lists; an effect
    written as "" would reach the ResourceFlavor verbatim, and the CRD only allows it absent.
    """
    if not isinstance(toleration, dict):
        return ["must be an object with key, operator, value and effect."]
    unknown = sorted(set(toleration) - TOLERATION_FIELDS)
    if unknown:
        return [f"unknown field(s) {', '.join(map(repr, unknown))}; use key, operator, value, effect."]
    if not all(isinstance(v, str) for v in toleration.values()):
        return ["key, operator, value and effect must be strings."]
    problems = []
    operator = toleration.get("operator", "Equal")
    key, value = toleration.get("key", ""), toleration.get("value", "")
    if operator not in TOLERATION_OPERATORS:
        problems.append(f"operator {operator!r} is not one of {', '.join(TOLERATION_OPERATORS)}.")
    if "effect" in toleration and (problem := syntax.taint_effect_problem(toleration["effect"])):
        problems.append(problem)
    if not key and operator != "Exists":
        problems.append("an empty key matches every taint and needs operator 'Exists'.")
    elif key and (problem := syntax.label_key_problem(key)):
        problems.append(problem)
    if operator == "Exists" and value:
        problems.append("operator 'Exists' matches any value; leave value empty.")
    elif value and (problem := syntax.label_value_problem(value)):
        problems.append(problem)
    return problems


def validate_tolerations(value: object) -> None:
    """Tolerations a Kueue ResourceFlavor accepts: one message per problem, numbered from 1."""
    if not isinstance(value, list):
        raise ValidationError("Tolerations must be a list of {key, operator, value, effect}.", code="invalid")
    if len(value) > MAX_TOLERATIONS:
        raise ValidationError(f"At most {MAX_TOLERATIONS} tolerations (a ResourceFlavor's limit).", code="max_length")
    messages = [
        f"Toleration {index}: {problem}"
        for index, toleration in enumerate(value, start=1)
        for problem in _toleration_problems(toleration)
    ]
    if messages:
        raise ValidationError(messages, code="toleration")
