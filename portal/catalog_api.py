"""The model catalog over the API (/api/v1/catalog/models/): every signed-in user reads the active
rows (platform admins every row); platform admins create, change, deactivate and import facts.

Thin callers of catalog.services. Lives in portal because the platform-admin rule is quotas'
(quotas.models.is_platform_admin), a layer above the catalog app.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from catalog import services
from catalog.api.serializers import (
    CatalogModelSerializer,
    CatalogModelWriteSerializer,
    DeactivateSerializer,
    ImportFactsSerializer,
)
from catalog.filtersets import CatalogModelFilter
from catalog.models import CatalogModel
from catalog.permissions import CatalogAction, Standing, require
from core.throttles import WriteThrottle
from quotas.models import is_platform_admin


def standing_of(user) -> Standing | None:
    """The user's standing in the catalog's permission table (None: not signed in)."""
    if is_platform_admin(user):
        return Standing.PLATFORM_ADMIN
    return Standing.SIGNED_IN if getattr(user, "is_authenticated", False) else None


def _body(serializer_class, request, **kwargs) -> dict:
    body = serializer_class(data=request.data, **kwargs)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


class CatalogModelViewSet(viewsets.ReadOnlyModelViewSet):
    """The models the platform offers, with their source, pinned revision, task, gating and
    architecture facts. Filter by `task`, size (`size`: the request form's picker's buckets, or
    `min_params_b`, `max_params_b`) and `search`."""

    serializer_class = CatalogModelSerializer
    filterset_class = CatalogModelFilter
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9-]{1,63}"
    throttle_classes = [WriteThrottle]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self):
        user = self.request.user
        return CatalogModel.objects.visible_to(user, platform_admin=is_platform_admin(user)).select_related(
            "created_by", "updated_by"
        )

    def _respond(self, row: CatalogModel, code=status.HTTP_200_OK) -> Response:
        row = CatalogModel.objects.select_related("created_by", "updated_by").get(pk=row.pk)
        return Response(CatalogModelSerializer(row).data, status=code)

    @extend_schema(request=CatalogModelWriteSerializer, responses={201: CatalogModelSerializer})
    def create(self, request, *args, **kwargs):
        require(standing_of(request.user), CatalogAction.CREATE)  # 403 before a body is judged
        data = _body(CatalogModelWriteSerializer, request)
        reason = data.pop("reason", "")
        row = services.catalog_model_create(
            actor=request.user, standing=standing_of(request.user), values=data, reason=reason
        )
        return self._respond(row, status.HTTP_201_CREATED)

    @extend_schema(request=CatalogModelWriteSerializer, responses=CatalogModelSerializer)
    def partial_update(self, request, *args, **kwargs):
        row = self.get_object()
        require(standing_of(request.user), CatalogAction.EDIT, row)
        data = _body(CatalogModelWriteSerializer, request, partial=True)
        reason = data.pop("reason", "")
        row = services.catalog_model_update(
            row_id=row.pk, actor=request.user, standing=standing_of(request.user), values=data, reason=reason
        )
        return self._respond(row)

    @extend_schema(request=DeactivateSerializer, responses=CatalogModelSerializer)
    @action(detail=True, methods=["post"])
    def deactivate(self, request, name=None):
        """No longer offered for new requests or policies; running deployments keep running."""
        row = self.get_object()
        data = _body(DeactivateSerializer, request)
        row = services.catalog_model_deactivate(
            row_id=row.pk, actor=request.user, standing=standing_of(request.user), **data
        )
        return self._respond(row)

    @extend_schema(request=ImportFactsSerializer, responses=CatalogModelSerializer)
    @action(detail=True, methods=["post"], url_path="import-facts", url_name="import-facts")
    def import_facts(self, request, name=None):
        """Read the architecture facts from the model's files (config.json and the like) in a
        directory under LOCAL_MODEL_ROOT or under an s3:// prefix (when the portal has an S3
        endpoint): the row's own source, or `path`. pvc:// and hub sources are not reachable from
        the portal: import from a local copy or type the facts in."""
        row = self.get_object()
        require(standing_of(request.user), CatalogAction.IMPORT_FACTS, row)
        data = _body(ImportFactsSerializer, request)
        row = services.catalog_model_import_facts(
            row_id=row.pk, actor=request.user, standing=standing_of(request.user), **data
        )
        return self._respond(row)
