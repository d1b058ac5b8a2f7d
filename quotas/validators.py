"""Validators for names that end up in Kubernetes objects."""

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
