"""Deployment API: CRUD plus approve / reject / withdraw / cancel / stop / start / scale / preview /
events / manifest / try. A deployment's revisions (history, diff, decisions on one revision,
rollback) are under revisions/ (deployments/api/revisions.py).

The metrics of a deployment (metrics/, summary/, advice/ under the same URLs) are served by the
metrics app (metrics/api/views.py) over the same queryset: VisibleDeploymentsMixin."""

from __future__ import annotations

from django.db.models import F, OuterRef, Subquery
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from core.throttles import WriteThrottle
from deployments import services
from deployments.api.serializers import (
    LIST_COLUMNS,
    ApproveSerializer,
    DeploymentCreateSerializer,
    DeploymentDetailSerializer,
    DeploymentEventSerializer,
    DeploymentSerializer,
    DeploymentUpdateSerializer,
    ManifestSerializer,
    PreviewSerializer,
    RejectSerializer,
    ScaleSerializer,
    TryResultSerializer,
    TrySerializer,
    WithdrawSerializer,
    list_rows,
)
from deployments.choices import RevisionStatus
from deployments.filtersets import DeploymentFilterSet
from deployments.models import SPEC_FIELDS, DeploymentRevision, ModelDeployment
from deployments.profiles import apply_profile
from deployments.services.common import spec_draft
from deployments.validation import check_draft
from quotas.models import GpuFlavor
from quotas.policy import allowed_flavor_ids
from quotas.services import flavors_with_quota


class VisibleDeploymentsMixin:
    """The deployments a request may see (other tenants' are 404), filtered by the same FilterSet
    as the list: every viewset on `deployments/<id>/…` uses it, this app's and those of the apps
    above (metrics), so tenant isolation and throttling are the same on all of them."""

    filterset_class = DeploymentFilterSet
    throttle_classes = [WriteThrottle]

    def visible_deployments(self):
        return ModelDeployment.objects.visible_to(self.request.user).live()

    def get_queryset(self):
        return self.visible_deployments().select_related("tenant", "flavor", "created_by")

    def filter_queryset(self, queryset):
        # With no filter parameter the FilterSet returns the queryset as it is, after building
        # and validating a form for nothing (~5 % of a list request; bench/b1_api_list.py).
        if not any(name in self.request.query_params for name in DeploymentFilterSet.base_filters):
            return queryset
        return super().filter_queryset(queryset)


def with_revision_numbers(queryset):
    """Annotate the serving and the waiting revision's numbers (DeploymentSerializer reads them):
    a join and a subquery in the same statement, instead of two queries per deployment."""
    waiting = DeploymentRevision.objects.filter(deployment=OuterRef("pk"), status=RevisionStatus.PROPOSED)
    return queryset.annotate(
        serving_number=F("serving_revision__number"), pending_number=Subquery(waiting.values("number")[:1])
    )


class DeploymentViewSet(
    VisibleDeploymentsMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.ReadOnlyModelViewSet,
):
    """Model deployments of the tenants you belong to. Other tenants' deployments are 404.

    A change to a deployment that was approved is a proposed revision: the deployment keeps its
    state, its GPUs and what serves until a platform admin (or the tenant's policy) approves it."""

    serializer_class = DeploymentDetailSerializer
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_serializer_class(self):
        return DeploymentSerializer if self.action == "list" else DeploymentDetailSerializer

    def get_queryset(self):
        if self.action != "list":
            return with_revision_numbers(super().get_queryset())
        # A page needs three names from the related rows, not the rows: annotating them
        # keeps the query at one statement and skips building 3 model instances per item.
        return with_revision_numbers(self.visible_deployments()).annotate(
            tenant_slug=F("tenant__slug"),
            flavor_name=F("flavor__name"),
            created_by_username=F("created_by__username"),
        )

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()).values(*LIST_COLUMNS))
        return self.get_paginated_response(list_rows(page))

    def _respond(self, dep, code=status.HTTP_200_OK):
        dep.refresh_from_db()
        return Response(DeploymentDetailSerializer(dep, context=self.get_serializer_context()).data, status=code)

    @extend_schema(request=DeploymentCreateSerializer, responses={201: DeploymentDetailSerializer})
    def create(self, request, *args, **kwargs):
        body = DeploymentCreateSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        tenant = data.pop("tenant")
        data = apply_profile(data, sent=set(request.data), tenant=tenant).data  # what was sent wins
        dep = services.deployment_create(tenant=tenant, user=request.user, data=data)
        return self._respond(dep, status.HTTP_201_CREATED)

    @extend_schema(request=DeploymentUpdateSerializer, responses=DeploymentDetailSerializer)
    def partial_update(self, request, *args, **kwargs):
        """Propose a change: the fields sent, over the waiting proposal (or what serves). Once the
        deployment was approved, it stays as it is; the change waits in `proposed_revision` unless it
        needs no approval (fewer GPUs, names, autoscaling target) or the tenant's policy covers it."""
        dep = self.get_object()
        body = DeploymentUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        # A change builds on the waiting proposal when there is one (deployment_update does too).
        waiting = dep.proposed_revision
        spec = spec_draft(waiting.spec) if waiting else {k: getattr(dep, k) for k in SPEC_FIELDS}
        data = apply_profile(
            dict(body.validated_data),
            sent=set(request.data),
            base=spec,
            tenant=dep.tenant,
            credit_gpus=dep.reserved_gpus,
        ).data
        return self._respond(services.deployment_update(deployment_id=dep.pk, user=request.user, data=data))

    def update(self, request, *args, **kwargs):
        return self.partial_update(request, *args, **kwargs)

    @extend_schema(responses={202: DeploymentDetailSerializer})
    def destroy(self, request, *args, **kwargs):
        dep = self.get_object()
        return self._respond(
            services.deployment_delete(deployment_id=dep.pk, user=request.user), status.HTTP_202_ACCEPTED
        )

    def _act(self, service, **kwargs):
        dep = self.get_object()
        return self._respond(service(deployment_id=dep.pk, **kwargs))

    def _with_body(self, request, service, serializer_class, **kwargs):
        body = serializer_class(data=request.data)
        body.is_valid(raise_exception=True)
        return self._act(service, **kwargs, **body.validated_data)

    @extend_schema(request=ApproveSerializer, responses={200: DeploymentDetailSerializer, 400: dict, 409: dict})
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        """Approve the revision you reviewed (platform admins only): it becomes the serving revision
        and its GPUs are reserved. A stale revision number is a 409 (`stale_revision`)."""
        return self._with_body(request, services.deployment_approve, ApproveSerializer, approver=request.user)

    @extend_schema(request=RejectSerializer, responses={200: DeploymentDetailSerializer, 400: dict, 409: dict})
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        """Reject the revision you reviewed, with a reason (platform admins only). A rejected first
        request is final; a rejected change leaves the serving revision running untouched."""
        return self._with_body(request, services.deployment_reject, RejectSerializer, approver=request.user)

    @extend_schema(request=WithdrawSerializer, responses={200: DeploymentDetailSerializer, 400: dict, 409: dict})
    @action(detail=True, methods=["post"])
    def withdraw(self, request, pk=None):
        """Withdraw the proposed change you name (members); the serving revision runs on untouched.
        Before anything was approved, `cancel` withdraws the request instead."""
        return self._with_body(request, services.deployment_withdraw, WithdrawSerializer, user=request.user)

    @extend_schema(request=None, responses=DeploymentDetailSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel a request nothing of which was ever approved (pending approval only; final)."""
        return self._act(services.deployment_cancel, user=request.user)

    @extend_schema(request=None, responses=DeploymentDetailSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        """Stop serving: the GPUs are released at once. A waiting change stays waiting."""
        return self._act(services.deployment_stop, user=request.user)

    @extend_schema(request=None, responses=DeploymentDetailSerializer)
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        """Start a stopped or failed deployment on its serving revision (its GPUs are reserved again)."""
        return self._act(services.deployment_start, user=request.user)

    @extend_schema(request=ScaleSerializer, responses=DeploymentDetailSerializer)
    @action(detail=True, methods=["post"])
    def scale(self, request, pk=None):
        """Change the replica range. Within the approved GPUs it applies at once; beyond them it is a
        proposed change (409 `change_pending` while another change waits)."""
        return self._with_body(request, services.deployment_scale, ScaleSerializer, user=request.user)

    @extend_schema(responses=DeploymentEventSerializer(many=True))
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        dep = self.get_object()
        page = self.paginate_queryset(dep.events.select_related("actor"))
        return self.get_paginated_response(DeploymentEventSerializer(page, many=True).data)

    @extend_schema(responses=ManifestSerializer)
    @action(detail=True, methods=["get"], url_path="manifest", url_name="rendered-manifest")
    def manifest(self, request, pk=None):
        """What the runtime applies for the current spec (the detail page's manifest panel)."""
        from deployments.presenters import rendered_manifest

        return Response(rendered_manifest(self.get_object()))

    @extend_schema(request=TrySerializer, responses={200: TryResultSerializer, 400: dict, 409: dict, 502: dict})
    @action(detail=True, methods=["post"], url_path="try", url_name="try-prompt")
    def try_prompt(self, request, pk=None):
        """Send one prompt through the portal and get the completion and its latency (the detail
        page's Try-it box). 400 on `documents` when a score deployment gets none; 409 while the
        deployment has no endpoint; 502 when the endpoint fails."""
        from deployments.trying import input_problem, try_prompt

        dep = self.get_object()
        body = TrySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if problem := input_problem(dep, body.validated_data["documents"]):
            raise ValidationError({"documents": [problem]})
        if not dep.endpoint_url:
            return Response({"detail": "This deployment has no endpoint yet."}, status=status.HTTP_409_CONFLICT)
        result = try_prompt(dep, **body.validated_data)
        if "error" in result:
            return Response({"detail": result["error"]}, status=status.HTTP_502_BAD_GATEWAY)
        return Response(result)

    @extend_schema(request=PreviewSerializer, responses={200: dict})
    @action(detail=False, methods=["post"])
    def preview(self, request):
        """Every problem of a draft (`errors`: each field with all its messages), its quota and memory
        fit, its GPUs and price per hour, and the flavors the tenant has no quota for; creates nothing."""
        body = PreviewSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        tenant = data.pop("tenant")
        check = check_draft(data, tenant=tenant)
        result = check.as_dict()
        result["gpus_per_replica"] = data.get("tensor_parallel_size", 1) * data.get("pipeline_parallel_size", 1)
        result["flavors_without_quota"] = _flavors_without_quota(tenant)
        return Response(result)


def _flavors_without_quota(tenant) -> list[str]:
    """The flavors the tenant may request whose quota it lacks: what the request form marks "no quota"."""
    offered = GpuFlavor.objects.filter(active=True).exclude(pk__in=flavors_with_quota(tenant))
    allowed = allowed_flavor_ids(tenant)
    if allowed is not None:
        offered = offered.filter(pk__in=allowed)
    return sorted(offered.values_list("name", flat=True))
