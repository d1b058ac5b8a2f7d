"""GET /api/v1/gateway/<tenant>/models[/<model>]: the tenant endpoint's OpenAI `/v1/models`, which
the platform Gateway routes to the portal (runtime.manifests.tenant_route). Authenticated by the
API key the client presents (Authorization: Bearer), not by a portal session or token: a key of
another tenant, a revoked or unknown one are all 401, in OpenAI's error shape, as the engines
answer a bad key."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from access.models_listing import key_for_tenant, models_for_key

KEY_MAX = 200  # far longer than a minted key; longer headers are refused before any lookup


def _error(code: int, message: str, kind: str, error_code: str) -> Response:
    return Response({"error": {"message": message, "type": kind, "param": None, "code": error_code}}, status=code)


def _presented_key(request) -> str:
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    key = key.strip()
    return key if scheme.lower() == "bearer" and 0 < len(key) <= KEY_MAX else ""


class TenantModelsView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        auth=[],
        operation_id="gateway_models_list",
        summary="The models an API key may call on its tenant's endpoint (OpenAI's GET /v1/models)",
        responses={200: OpenApiResponse(description="OpenAI list of model objects"), 401: None},
    )
    def get(self, request, tenant: str):
        return self.answer(request, tenant, None)

    def answer(self, request, tenant: str, model: str | None):
        key = key_for_tenant(_presented_key(request), tenant)
        if key is None:
            return _error(
                status.HTTP_401_UNAUTHORIZED,
                "Incorrect API key provided: use a key minted for this tenant (Authorization: Bearer <key>).",
                "invalid_request_error",
                "invalid_api_key",
            )
        models = models_for_key(key)
        if model is None:
            return Response({"object": "list", "data": models})
        for found in models:
            if found["id"] == model:
                return Response(found)
        return _error(
            status.HTTP_404_NOT_FOUND,
            f"The model {model[:200]!r} does not exist or this key may not use it.",
            "invalid_request_error",
            "model_not_found",
        )


class TenantModelView(TenantModelsView):
    @extend_schema(
        auth=[],
        operation_id="gateway_models_retrieve",
        summary="One model an API key may call on its tenant's endpoint (OpenAI's GET /v1/models/{model})",
        responses={200: OpenApiResponse(description="OpenAI model object"), 401: None, 404: None},
    )
    def get(self, request, tenant: str, model: str):
        return self.answer(request, tenant, model)


class TenantEndpointsView(APIView):
    """The OpenAI base URL of each tenant you belong to: one per tenant, routing by `model` to its
    deployments and to the models shared with it (`gateway`: on the cluster Gateway; `local`: on
    the portal machine's local gateway; null where there is none)."""

    @extend_schema(
        operation_id="tenant_endpoints_list",
        responses={200: OpenApiResponse(description='[{"tenant", "gateway", "local"}, ...]')},
    )
    def get(self, request):
        from access.tenant_endpoint import endpoints
        from quotas.models import Tenant

        return Response(endpoints(Tenant.objects.visible_to(request.user).order_by("slug")))


class WakeView(APIView):
    """POST /api/v1/gateway/wake/<deployment>: the activator asks the portal to wake a deployment
    the idle policy or serving schedule stopped, for a request that came with the API key it passes
    on (Authorization: Bearer). 202: woken now or starting; 200: serving; 409 with Retry-After and
    `code` (not_wakeable, schedule_closed, quota_exceeded, budget_stopped, archived, gone): refused.
    `timeout_seconds` is the deployment's tenant's default wait (quotas.Tenant.wake_timeout_seconds)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        auth=[],
        request=None,
        operation_id="gateway_wake",
        summary="Wake a deployment the policy stopped, for a request with this API key (the activator's call)",
        responses={
            200: OpenApiResponse(description='{"outcome", "state", "timeout_seconds"}'),
            202: OpenApiResponse(description='{"outcome", "state", "timeout_seconds"}'),
            401: None,
            404: None,
            409: OpenApiResponse(description='{"outcome": "refused", "code", "message", "retry_after"}'),
        },
    )
    def post(self, request, deployment: int):
        from access.wake import wake_for_key

        key, wake, timeout = wake_for_key(_presented_key(request), deployment)
        if key is None:
            return _error(
                status.HTTP_401_UNAUTHORIZED, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
            )
        if wake is None:
            return _error(
                status.HTTP_404_NOT_FOUND,
                "No such deployment, or this key may not use it.",
                "invalid_request_error",
                "model_not_found",
            )
        body = {"outcome": wake.outcome, "state": wake.state, "timeout_seconds": timeout}
        if wake.refused:
            body |= {"code": wake.code, "message": wake.message, "retry_after": wake.retry_after}
            return Response(body, status=status.HTTP_409_CONFLICT, headers={"Retry-After": str(wake.retry_after)})
        return Response(body, status=status.HTTP_200_OK if wake.outcome == "serving" else status.HTTP_202_ACCEPTED)
