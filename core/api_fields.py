"""DRF fields the portal's API shares."""

from __future__ import annotations

from rest_framework import serializers


class NamedRef(serializers.SlugRelatedField):
    """A reference by name (a tenant's slug, a flavor's name) that refuses in the portal's words:
    "No tenant named 'x' (that you can see)." rather than DRF's "Object with slug=x does not
    exist.". Another tenant's name and an unknown one read the same."""

    def __init__(self, noun: str, **kwargs):
        kwargs.setdefault("error_messages", {})
        kwargs["error_messages"].setdefault("does_not_exist", f"No {noun} named '{{value}}' that you can use.")
        kwargs["error_messages"].setdefault("invalid", f"Enter the {noun}'s name.")
        super().__init__(**kwargs)
