"""Validators for names and values that end up in Kubernetes objects."""

import re

from django.core.exceptions import ValidationError

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


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


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def validate_label_value(value: str) -> None:
    """A Kubernetes label value (≤ 63 chars, alphanumerics, '-', '_', '.')."""
    if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        raise ValidationError(
            "Not a valid Kubernetes label value (≤ 63 characters: letters, digits, '-', '_', '.').",
            code="label_value",
        )


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
