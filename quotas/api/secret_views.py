"""The tenant's storage and credentials in the API: `tenants/<slug>/storage/` is the model-cache
claim (platform admins set the tenant's own size and class: quotas.model_cache);
`tenants/<slug>/credentials/` lists what is set (never a value), `…/hf_token/` and `…/s3/` set
(PUT: set or replace) and delete them (quotas.tenant_secrets).

The values are write-only: no response carries them, the list shows who set each, when, and its
last 4 characters. Members and viewers get 403 on PUT and DELETE; an archived tenant 409 on PUT.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.exceptions import Forbidden
from core.throttles import WriteThrottle
from quotas import model_cache, tenant_secrets
from quotas.models import Tenant, is_platform_admin
from quotas.secret_models import SecretKind
from quotas.tenant_secrets import CLEANERS, SecretAction


class CredentialSerializer(serializers.Serializer):
    """One credential's state: never its value."""

    kind = serializers.ChoiceField(choices=SecretKind.choices)
    label = serializers.CharField()
    secret_name = serializers.CharField(help_text="The Secret in the tenant namespace, named by the portal.")
    set = serializers.BooleanField()
    set_at = serializers.DateTimeField(allow_null=True)
    set_by = serializers.CharField(allow_null=True)
    ends_in = serializers.CharField(allow_null=True, help_text="The last 4 characters of the token or access key id.")


class _Cleaned(serializers.Serializer):
    kind: SecretKind

    def validate(self, attrs):
        _, errors = CLEANERS[self.kind](attrs)
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


def _write_only(help_text: str, *, required: bool = True) -> serializers.CharField:
    return serializers.CharField(
        write_only=True,
        required=required,
        allow_blank=not required,
        trim_whitespace=False,
        max_length=4096,
        style={"input_type": "password"},
        help_text=help_text,
    )


class HfTokenWriteSerializer(_Cleaned):
    kind = SecretKind.HF_TOKEN
    token = _write_only("A Hugging Face token (hf_…): written into Secret llm-portal-hf-token, key HF_TOKEN.")


class S3WriteSerializer(_Cleaned):
    kind = SecretKind.S3
    access_key_id = _write_only("Key AWS_ACCESS_KEY_ID of Secret llm-portal-s3.")
    secret_access_key = _write_only("Key AWS_SECRET_ACCESS_KEY.")
    endpoint = serializers.CharField(
        required=False, allow_blank=True, max_length=2048, write_only=True, help_text="http(s) URL; empty: AWS S3."
    )
    region = serializers.CharField(
        required=False, allow_blank=True, max_length=64, write_only=True, help_text="Empty: us-east-1."
    )


def _tenant(request, slug: str) -> Tenant:
    return get_object_or_404(Tenant.objects.visible_to(request.user), slug=slug)


def _state(tenant: Tenant, kind: SecretKind) -> dict:
    return next(row for row in tenant_secrets.secrets_status(tenant) if row["kind"] == kind.value)


class TenantCredentialsView(APIView):
    """Whether the tenant's Hugging Face token and S3 credentials are set; everyone who sees the tenant."""

    @extend_schema(responses=CredentialSerializer(many=True))
    def get(self, request, slug: str):
        tenant = _tenant(request, slug)
        tenant_secrets.authorize_see(request.user, tenant)
        return Response(CredentialSerializer(tenant_secrets.secrets_status(tenant), many=True).data)


class _CredentialView(APIView):
    throttle_classes = [WriteThrottle]
    kind: SecretKind
    write_serializer: type[serializers.Serializer]

    def put(self, request, slug: str):
        tenant = _tenant(request, slug)
        tenant_secrets.authorize(request.user, tenant, SecretAction.SET)  # 403 before the body is read
        body = self.write_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            tenant_secrets.secret_set(tenant=tenant, user=request.user, kind=self.kind, data=dict(body.validated_data))
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.message_dict) from None
        return Response(CredentialSerializer(_state(tenant, self.kind)).data)

    def delete(self, request, slug: str):
        tenant = _tenant(request, slug)
        tenant_secrets.secret_delete(tenant=tenant, user=request.user, kind=self.kind)
        return Response(status=status.HTTP_204_NO_CONTENT)


class HfTokenCredentialView(_CredentialView):
    """Set (or replace) the tenant's Hugging Face token, or delete it: tenant admins and platform admins.
    Deployments that name no Secret of their own use it."""

    kind = SecretKind.HF_TOKEN
    write_serializer = HfTokenWriteSerializer

    @extend_schema(request=HfTokenWriteSerializer, responses=CredentialSerializer)
    def put(self, request, slug: str):
        return super().put(request, slug)

    @extend_schema(responses={204: None})
    def delete(self, request, slug: str):
        return super().delete(request, slug)


class S3CredentialView(_CredentialView):
    """Set (or replace) the tenant's S3 credentials, or delete them: tenant admins and platform admins."""

    kind = SecretKind.S3
    write_serializer = S3WriteSerializer

    @extend_schema(request=S3WriteSerializer, responses=CredentialSerializer)
    def put(self, request, slug: str):
        return super().put(request, slug)

    @extend_schema(responses={204: None})
    def delete(self, request, slug: str):
        return super().delete(request, slug)


class StorageSerializer(serializers.Serializer):
    claim = serializers.CharField(help_text="MODEL_CACHE_PVC: the claim's name in the tenant namespace (empty: none).")
    size_gi = serializers.IntegerField(
        help_text="The size the portal keeps (the tenant's own, else MODEL_CACHE_SIZE_GI)."
    )
    storage_class = serializers.CharField(help_text='The class ("": the cluster\'s default).')
    model_cache_size_gi = serializers.IntegerField(
        allow_null=True, help_text="The tenant's own size (null: the setting)."
    )
    model_cache_storage_class = serializers.CharField(help_text='The tenant\'s own class ("": the setting).')
    status = serializers.DictField(help_text="What the last sync found or did: action, problem, checked_at.")


class StorageWriteSerializer(serializers.Serializer):
    model_cache_size_gi = serializers.IntegerField(
        allow_null=True, help_text="GiB, only ever grown (null: the setting)."
    )
    model_cache_storage_class = serializers.CharField(
        allow_blank=True,
        max_length=253,
        help_text='A StorageClass name ("": the setting); fixed once the claim exists.',
    )


def _storage(tenant: Tenant) -> dict:
    from django.conf import settings

    size_gi, storage_class = model_cache.wanted(tenant)
    return {
        "claim": settings.MODEL_CACHE_PVC,
        "size_gi": size_gi,
        "storage_class": storage_class,
        "model_cache_size_gi": tenant.model_cache_size_gi,
        "model_cache_storage_class": tenant.model_cache_storage_class,
        "status": tenant.model_cache_status or {},
    }


class TenantStorageView(APIView):
    """The tenant's model-cache claim: everyone who sees the tenant reads it, platform admins set
    the tenant's own size and class (PUT)."""

    throttle_classes = [WriteThrottle]

    @extend_schema(responses=StorageSerializer)
    def get(self, request, slug: str):
        return Response(StorageSerializer(_storage(_tenant(request, slug))).data)

    @extend_schema(request=StorageWriteSerializer, responses=StorageSerializer)
    def put(self, request, slug: str):
        tenant = _tenant(request, slug)
        if not is_platform_admin(request.user):
            raise Forbidden("Only platform admins set a tenant's model-cache size and storage class.")
        body = StorageWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            tenant = model_cache.storage_set(tenant_id=tenant.pk, actor=request.user, **body.validated_data)
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.message_dict) from None
        return Response(StorageSerializer(_storage(tenant)).data)
