"""Validators for names and values that end up in Kubernetes objects."""

import re

from django.core.exceptions import ValidationError

from runtime.manifests.common import DNS1035_LABEL, DNS1123_LABEL, LABEL_DOMAIN, LABEL_FLAVOR, MAX_OWN_NODE_LABELS


def validate_dns1123_label(value: str, max_length: int = 63) -> None:
    """A DNS-1123 label: lowercase letters, digits and '-', starts and ends alphanumeric."""
    if not isinstance(value, str) or not value:
        raise ValidationError("Enter a name.", code="required")
    if len(value) > max_length:
        raise ValidationError(f"At most {max_length} characters (this one has {len(value)}).", code="max_length")
    if not DNS1123_LABEL.fullmatch(value):
        raise ValidationError(
            "Use lowercase letters, digits and '-', starting and ending with a letter or digit "
            "(a Kubernetes DNS-1123 label).",
            code="dns1123",
        )


def validate_dns1035_label(value: str) -> None:
    """A DNS-1035 label (what KubeRay and KServe require of their objects' names): a DNS-1123
    label that starts with a letter."""
    validate_dns1123_label(value)
    if not DNS1035_LABEL.fullmatch(value):
        raise ValidationError(
            "Start with a lowercase letter (KubeRay and KServe refuse names starting with a digit).",
            code="dns1035",
        )


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def validate_label_value(value: str) -> None:
    """A Kubernetes label value (≤ 63 chars, alphanumerics, '-', '_', '.')."""
    if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        raise ValidationError(
            "Not a valid Kubernetes label value (≤ 63 characters: letters, digits, '-', '_', '.').",
            code="label_value",
        )


# A label key: an optional DNS-1123 subdomain prefix (≤ 253) and '/', then a name (≤ 63).
LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)


def _node_label_problem(key: object, value: object) -> str | None:
    """Why one node label cannot go on a ResourceFlavor (and a node), or None."""
    shown = repr(key)[:80]
    if not isinstance(key, str) or not LABEL_KEY.fullmatch(key):
        return f"{shown} is not a label key (an optional DNS prefix and '/', then a name)."
    prefix, _, name = key.rpartition("/")
    if len(prefix) > 253 or len(name) > 63:
        return f"{shown} is too long (prefix ≤ 253, name ≤ 63 characters)."
    if prefix == LABEL_DOMAIN or prefix.endswith("." + LABEL_DOMAIN):
        return f"{shown} is in the portal's label domain; the portal sets {LABEL_FLAVOR}=<flavor name> itself."
    if isinstance(value, (dict, list)):
        return f"{shown}: nested values are not node labels; write each label as one key and one text value."
    if not isinstance(value, str):
        return f"{shown}: the value must be text (quote numbers and true/false)."
    if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        return f"{shown}: {value[:70]!r} is not a label value (≤ 63 characters: letters, digits, '-', '_', '.')."
    return None


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


TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")
TOLERATION_FIELDS = frozenset({"key", "operator", "value", "effect"})
MAX_TOLERATIONS = 8  # the ResourceFlavor CRD's maxItems


def _toleration_problems(toleration: object) -> list[str]:
    """What the Kueue ResourceFlavor CRD (schema + CEL rules) would refuse in one toleration.

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
    if operator not in TOLERATION_OPERATORS:
        problems.append(f"operator {operator!r} is not one of {', '.join(TOLERATION_OPERATORS)}.")
    if "effect" in toleration and toleration["effect"] not in TOLERATION_EFFECTS:
        problems.append(f"effect {toleration['effect']!r} is not one of {', '.join(TOLERATION_EFFECTS)}.")
    if not toleration.get("key") and operator != "Exists":
        problems.append("an empty key matches every taint and needs operator 'Exists'.")
    if operator == "Exists" and toleration.get("value"):
        problems.append("operator 'Exists' matches any value; leave value empty.")
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
