"""API shapes for the catalog (portal.catalog_api): the row, the write body and the import body."""

from __future__ import annotations

from rest_framework import serializers

from catalog.choices import Task, TokenSource
from catalog.models import FACT_FIELDS, NAME_MAX, CatalogModel
from catalog.sources import REVISION_MAX


class CatalogModelSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True)
    updated_by = serializers.CharField(source="updated_by.username", default=None, read_only=True)
    kind = serializers.CharField(read_only=True, help_text="hf, s3, pvc or local.")

    class Meta:
        model = CatalogModel
        fields = [
            "name",
            "display_name",
            "source",
            "kind",
            "revision",
            "follow_default_branch",
            "task",
            "licence",
            "gated",
            "token_source",
            "token_secret",
            *FACT_FIELDS,
            "facts_imported_at",
            "notes",
            "active",
            "created_by",
            "updated_by",
            "created",
            "updated",
        ]
        read_only_fields = fields


def _reason():
    return serializers.CharField(
        max_length=2000, required=False, allow_blank=True, default="", write_only=True, help_text="Why: audit log."
    )


class CatalogModelWriteSerializer(serializers.Serializer):
    """Create (name, display name, source required) or change (any subset; the name is fixed)."""

    name = serializers.RegexField(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=NAME_MAX)
    display_name = serializers.CharField(max_length=100)
    source = serializers.CharField(max_length=500)
    revision = serializers.CharField(max_length=REVISION_MAX, required=False, allow_blank=True)
    follow_default_branch = serializers.BooleanField(required=False)
    task = serializers.ChoiceField(choices=Task.choices, required=False)
    licence = serializers.CharField(max_length=100, required=False, allow_blank=True)
    gated = serializers.BooleanField(required=False)
    token_source = serializers.ChoiceField(choices=TokenSource.choices, required=False)
    token_secret = serializers.CharField(max_length=253, required=False, allow_blank=True)
    architecture = serializers.CharField(max_length=100, required=False, allow_blank=True, allow_null=True)
    model_type = serializers.CharField(max_length=60, required=False, allow_blank=True, allow_null=True)
    dtype = serializers.CharField(max_length=20, required=False, allow_blank=True, allow_null=True)
    parameters = serializers.IntegerField(min_value=1, max_value=10**15, required=False, allow_null=True)
    weight_bytes = serializers.IntegerField(min_value=1, max_value=10**16, required=False, allow_null=True)
    layers = serializers.IntegerField(min_value=1, max_value=10**7, required=False, allow_null=True)
    hidden_size = serializers.IntegerField(min_value=1, max_value=10**7, required=False, allow_null=True)
    attention_heads = serializers.IntegerField(min_value=1, max_value=10**7, required=False, allow_null=True)
    kv_heads = serializers.IntegerField(min_value=1, max_value=10**7, required=False, allow_null=True)
    head_dim = serializers.IntegerField(min_value=1, max_value=10**7, required=False, allow_null=True)
    max_context = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False, allow_null=True)
    vocab_size = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False, allow_null=True)
    kv_elements_per_token = serializers.IntegerField(min_value=1, max_value=10**12, required=False, allow_null=True)
    notes = serializers.CharField(max_length=5000, required=False, allow_blank=True)
    active = serializers.BooleanField(required=False)
    reason = _reason()


class ImportFactsSerializer(serializers.Serializer):
    path = serializers.CharField(
        max_length=4096,
        required=False,
        allow_blank=True,
        default="",
        help_text="A model directory under LOCAL_MODEL_ROOT or an s3://bucket/path (read when the portal has an S3 "
        "endpoint); empty: the row's own source. The portal never reads volume claims or the hub.",
    )
    reason = _reason()


class DeactivateSerializer(serializers.Serializer):
    reason = _reason()
