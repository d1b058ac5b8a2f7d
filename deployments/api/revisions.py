"""A deployment's revisions: /api/v1/deployments/<id>/revisions/ (history), <number>/ (one),
diff/?from=a&to=b, and the decisions on one revision: <number>/approve/, reject/, withdraw/,
rollback/.

Same queryset and throttling as the deployments API (VisibleDeploymentsMixin): another tenant's
deployment and its revisions are 404. A revision number the deployment does not have is a 404
in the path and a 400 on the field in the query. Every decision goes through the same service
as the deployment-level approve / reject / withdraw (deployments.services), which checks the
(role, state, action, revision status) table and answers 403 / 409 as those do. A decision
answers with the deployment, as every deployment action does.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from core.params import ParamError, parse_int
from deployments import services
from deployments.api.revision_serializers import (
    RevisionDiffQuerySerializer,
    RevisionDiffSerializer,
    RevisionSerializer,
    revision_rows,
)
from deployments.api.serializers import DeploymentDetailSerializer, ReasonSerializer, RejectReasonSerializer
from deployments.api.views import VisibleDeploymentsMixin
from deployments.changes import revision_pair_diff

DECISIONS = ("approve", "reject", "withdraw", "rollback")
NUMBER = OpenApiParameter(
    "number", OpenApiTypes.INT, OpenApiParameter.PATH, description="The revision's number (1 is the first request)."
)
DECIDED = {200: DeploymentDetailSerializer, 400: dict, 403: dict, 404: dict, 409: dict}


class DeploymentRevisionViewSet(VisibleDeploymentsMixin, viewsets.GenericViewSet):
    """The revisions of one deployment: who proposed and decided each, what each changed."""

    serializer_class = RevisionSerializer
    # The deployment list's filters do not apply to one deployment's revisions.
    filter_backends: list = []

    def _revision(self):
        dep = self.get_object()
        # A path segment names a revision or nothing: anything core.params refuses (other scripts'
        # digits, a number past the column's range) is a 404, like a number with no revision.
        try:
            number = parse_int(self.kwargs["number"], name="number", minimum=1)
        except ParamError:
            number = None
        revisions = dep.revisions.select_related("proposed_by", "decided_by")
        rev = revisions.filter(number=number).first() if number is not None else None
        if rev is None:
            raise NotFound(f"Deployment {dep.name} has no revision {number or 'by that number'}.")
        return dep, rev

    def _decided(self, dep):
        dep.refresh_from_db()
        return Response(DeploymentDetailSerializer(dep, context=self.get_serializer_context()).data)

    @extend_schema(responses=RevisionSerializer(many=True))
    def list(self, request, pk=None):
        """Every revision, newest first, with what it changed against the one before it."""
        dep = self.get_object()
        page = self.paginate_queryset(dep.revisions.select_related("proposed_by", "decided_by").order_by("-number"))
        return self.get_paginated_response(RevisionSerializer(revision_rows(dep, page), many=True).data)

    @extend_schema(parameters=[NUMBER], responses={200: RevisionSerializer, 404: dict})
    def retrieve(self, request, pk=None, number=None):
        """One revision: its spec, who proposed and decided it, and what it changed."""
        dep, rev = self._revision()
        return Response(RevisionSerializer(revision_rows(dep, [rev])[0]).data)

    @extend_schema(
        parameters=[RevisionDiffQuerySerializer], responses={200: RevisionDiffSerializer, 400: dict, 404: dict}
    )
    def diff(self, request, pk=None):
        """Field by field, with readable labels, from one revision to another of this deployment."""
        dep = self.get_object()
        query = RevisionDiffQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        a, b = query.validated_data["from"], query.validated_data["to"]
        try:
            changes = revision_pair_diff(dep, a, b)
        except LookupError:
            missing = b if dep.revisions.filter(number=a).exists() else a
            raise NotFound(f"Deployment {dep.name} has no revision {missing}.") from None
        return Response(RevisionDiffSerializer({"from": a, "to": b, "changes": changes}).data)

    @extend_schema(parameters=[NUMBER], request=ReasonSerializer, responses=DECIDED)
    def approve(self, request, pk=None, number=None):
        """Approve this revision (platform admins only): it becomes the serving revision. A
        revision that is no longer the one waiting is a 409 with code `stale_revision`."""
        dep, rev = self._revision()
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.deployment_approve(
            deployment_id=dep.pk, approver=request.user, revision=rev.number, **body.validated_data
        )
        return self._decided(dep)

    @extend_schema(parameters=[NUMBER], request=RejectReasonSerializer, responses=DECIDED)
    def reject(self, request, pk=None, number=None):
        """Reject this revision with a reason (platform admins only). A rejected change leaves the
        serving revision running; a rejected first request is final."""
        dep, rev = self._revision()
        body = RejectReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.deployment_reject(
            deployment_id=dep.pk, approver=request.user, revision=rev.number, **body.validated_data
        )
        return self._decided(dep)

    @extend_schema(parameters=[NUMBER], request=None, responses=DECIDED)
    def withdraw(self, request, pk=None, number=None):
        """Withdraw this proposed change (members); the serving revision runs on untouched."""
        dep, rev = self._revision()
        services.deployment_withdraw(deployment_id=dep.pk, user=request.user, revision=rev.number)
        return self._decided(dep)

    @extend_schema(parameters=[NUMBER], request=None, responses=DECIDED)
    def rollback(self, request, pk=None, number=None):
        """Propose this earlier approved revision again (members), through the same approval and
        policy rules as any change; the serving revision is a 409 with code `serving`."""
        dep, rev = self._revision()
        services.deployment_rollback(deployment_id=dep.pk, user=request.user, revision=rev.number)
        return self._decided(dep)
