"""Shared-model serializers: publications, subscriptions, and the bodies that change them."""

from __future__ import annotations

from rest_framework import serializers

from sharing.models import MAX_LIMIT, Publication, Subscription

SLUG_FIELD = {"max_length": 63, "regex": r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"}


def _limit(help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_LIMIT, help_text=help_text + " Null: no limit."
    )


class PublicationSerializer(serializers.ModelSerializer):
    deployment_name = serializers.CharField(source="deployment.name", read_only=True)
    owner = serializers.CharField(source="deployment.tenant.slug", read_only=True)
    model = serializers.SerializerMethodField(help_text="The served name consumers call it by.")
    tenants = serializers.SlugRelatedField(slug_field="slug", many=True, read_only=True)

    class Meta:
        model = Publication
        fields = [
            "id",
            "deployment",
            "deployment_name",
            "owner",
            "model",
            "active",
            "to_all",
            "tenants",
            "auto_approve",
            "tokens_per_minute",
            "requests_per_minute",
            "created",
            "updated",
        ]
        read_only_fields = fields

    def get_model(self, publication: Publication) -> str:
        return publication.deployment.served_model_name or publication.deployment.name


class PublishSerializer(serializers.Serializer):
    deployment = serializers.IntegerField(min_value=1)
    to_all = serializers.BooleanField(default=False, help_text="Offer it to every tenant.")
    tenants = serializers.ListField(
        child=serializers.RegexField(**SLUG_FIELD), required=False, default=list, max_length=500
    )
    auto_approve = serializers.BooleanField(default=False, help_text="Subscriptions are active at once.")
    tokens_per_minute = _limit("Each new consumer's tokens per minute.")
    requests_per_minute = _limit("Each new consumer's requests per minute.")


class SubscriptionSerializer(serializers.ModelSerializer):
    consumer = serializers.CharField(source="consumer.slug", read_only=True)
    deployment = serializers.IntegerField(source="publication.deployment_id", read_only=True)
    owner = serializers.CharField(source="publication.deployment.tenant.slug", read_only=True)
    model = serializers.SerializerMethodField()
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, default=None)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, default=None)

    class Meta:
        model = Subscription
        fields = [
            "id",
            "consumer",
            "deployment",
            "owner",
            "model",
            "state",
            "tokens_per_minute",
            "requests_per_minute",
            "requested_by",
            "decided_by",
            "decided_at",
            "created",
        ]
        read_only_fields = fields

    def get_model(self, subscription: Subscription) -> str:
        dep = subscription.publication.deployment
        return dep.served_model_name or dep.name


class SubscribeSerializer(serializers.Serializer):
    tenant = serializers.RegexField(help_text="The consuming tenant's slug.", **SLUG_FIELD)
    deployment = serializers.IntegerField(min_value=1, help_text="The shared deployment.")


class LimitsSerializer(serializers.Serializer):
    tokens_per_minute = _limit("The consumer's tokens per minute.")
    requests_per_minute = _limit("The consumer's requests per minute.")


class EmptySerializer(serializers.Serializer):
    pass
