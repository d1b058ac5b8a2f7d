"""/api/v1/publications/ and /api/v1/subscriptions/: what the sharing pages do, over the API."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404  # a malformed id is a 404, never a ValueError
from rest_framework.response import Response

from core.exceptions import DomainError
from core.throttles import WriteThrottle
from deployments.models import ModelDeployment
from quotas.models import Tenant
from sharing import services
from sharing.api.serializers import (
    EmptySerializer,
    LimitsSerializer,
    PublicationSerializer,
    PublishSerializer,
    SubscribeSerializer,
    SubscriptionSerializer,
)
from sharing.models import Publication, Subscription, SubscriptionState
from sharing.queries import visible_publications, visible_subscriptions
from sharing.views import SLUG


class PublicationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Deployments your tenants share, and those shared with your tenants."""

    serializer_class = PublicationSerializer
    throttle_classes = [WriteThrottle]
    lookup_value_regex = r"[0-9]+"  # anything else is a 404 from the router, never a lookup

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Publication.objects.none()
        return (
            visible_publications(self.request.user)
            .select_related("deployment__tenant")
            .prefetch_related("tenants")
            .order_by("-created", "-id")
        )

    @extend_schema(request=PublishSerializer, responses={200: PublicationSerializer})
    def create(self, request, *args, **kwargs):
        """Publish a deployment (or change its publication): audience, approval policy, default limits."""
        body = PublishSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        dep = ModelDeployment.objects.visible_to(request.user).filter(pk=data["deployment"]).first()
        if dep is None:
            raise DomainError("No such deployment.", field="deployment")
        publication = services.publish(
            user=request.user, deployment_id=dep.pk, **{k: data[k] for k in data if k != "deployment"}
        )
        return Response(self._shown(publication.pk), status=status.HTTP_200_OK)

    @extend_schema(request=EmptySerializer, responses={200: PublicationSerializer})
    @action(detail=True, methods=["post"], serializer_class=EmptySerializer)
    def unpublish(self, request, pk=None):
        """Stop sharing: every consumer's subscription ends."""
        publication = self.get_object()
        services.unpublish(user=request.user, deployment_id=publication.deployment_id)
        return Response(self._shown(publication.pk))

    def _shown(self, pk: int) -> dict:
        return PublicationSerializer(self.get_queryset().get(pk=pk), context={"request": self.request}).data


class SubscriptionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Subscriptions of your tenants to shared models, and to your tenants' shared deployments."""

    serializer_class = SubscriptionSerializer
    throttle_classes = [WriteThrottle]
    lookup_value_regex = r"[0-9]+"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Subscription.objects.none()
        found = visible_subscriptions(self.request.user).select_related(
            "consumer", "publication__deployment__tenant", "requested_by", "decided_by"
        )
        return found.order_by("-created", "-id")

    def filter_queryset(self, queryset):
        params = self.request.query_params
        state = params.get("state")
        if state:
            queryset = queryset.filter(state=state) if state in SubscriptionState.values else queryset.none()
        tenant = str(params.get("tenant") or "")
        if tenant:  # a slug or nothing matches (a NUL or an overlong value never reaches the database)
            queryset = queryset.filter(consumer__slug=tenant) if SLUG.fullmatch(tenant) else queryset.none()
        return queryset

    @extend_schema(request=SubscribeSerializer, responses={201: SubscriptionSerializer})
    def create(self, request, *args, **kwargs):
        """Ask for a shared model on your tenant's endpoint (active at once where its policy approves)."""
        body = SubscribeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        tenant = Tenant.objects.visible_to(request.user).filter(slug=body.validated_data["tenant"]).first()
        if tenant is None:
            raise DomainError("No such tenant.", field="tenant")
        found = services.subscribe(user=request.user, consumer=tenant, deployment_id=body.validated_data["deployment"])
        return Response(self._shown(found.pk), status=status.HTTP_201_CREATED)

    def _decide(self, request, pk, service, body_class=None):
        subscription = get_object_or_404(self.get_queryset(), pk=pk)
        data = {}
        if body_class is not None:
            body = body_class(data=request.data)
            body.is_valid(raise_exception=True)
            data = body.validated_data
        service(user=request.user, subscription_id=subscription.pk, **data)
        return Response(self._shown(subscription.pk))

    @extend_schema(request=LimitsSerializer, responses={200: SubscriptionSerializer})
    @action(detail=True, methods=["post"], serializer_class=LimitsSerializer)
    def approve(self, request, pk=None):
        """The owner approves (optionally with this consumer's own limits)."""
        return self._decide(request, pk, services.approve, LimitsSerializer)

    @extend_schema(request=EmptySerializer, responses={200: SubscriptionSerializer})
    @action(detail=True, methods=["post"], serializer_class=EmptySerializer)
    def refuse(self, request, pk=None):
        return self._decide(request, pk, services.refuse)

    @extend_schema(request=LimitsSerializer, responses={200: SubscriptionSerializer})
    @action(detail=True, methods=["post"], serializer_class=LimitsSerializer)
    def limits(self, request, pk=None):
        """The owner sets this consumer's limits (the gateways apply them within moments)."""
        return self._decide(request, pk, services.set_limits, LimitsSerializer)

    @extend_schema(request=EmptySerializer, responses={200: SubscriptionSerializer})
    @action(detail=True, methods=["post"], serializer_class=EmptySerializer)
    def cancel(self, request, pk=None):
        """The consumer ends its subscription."""
        return self._decide(request, pk, services.cancel)

    @extend_schema(request=EmptySerializer, responses={200: SubscriptionSerializer})
    @action(detail=True, methods=["post"], serializer_class=EmptySerializer)
    def end(self, request, pk=None):
        """The owner ends a consumer's subscription."""
        return self._decide(request, pk, services.end)

    def _shown(self, pk: int) -> dict:
        return SubscriptionSerializer(self.get_queryset().get(pk=pk), context={"request": self.request}).data
