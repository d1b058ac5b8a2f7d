"""GET /api/v1/serving-profiles/: the serving profiles' values for a draft, with a reason per field.

The request form's script asks the same function (deployments.profiles.profile_fields) through
the form's own view, so API users see what the form fills.
"""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from deployments.api.serializers import BackendField, StrictFloatField
from deployments.choices import Dtype, ServingProfile
from deployments.limits import LIMITS
from deployments.profiles import PROFILE_FIELDS, PROFILES, profile_fields, room_for
from quotas.models import GpuFlavor, Tenant


class ProfileQuerySerializer(serializers.Serializer):
    tenant = serializers.SlugField(max_length=63, help_text="The tenant whose quota and policy bound the values.")
    flavor = serializers.SlugField(max_length=63, help_text="The GPU flavor (its name).")
    model_source = serializers.CharField(max_length=500, required=False, default="", trim_whitespace=True)
    backend = BackendField(required=False)
    profile = serializers.ChoiceField(
        choices=[(p, label) for p, label in ServingProfile.choices if p],
        required=False,
        help_text="One profile; all three when left out.",
    )
    parameter_count_b = StrictFloatField(**LIMITS["parameter_count_b"].bounds(), required=False)
    max_model_len = serializers.IntegerField(**LIMITS["max_model_len"].bounds(), required=False)
    gpu_memory_utilization = StrictFloatField(**LIMITS["gpu_memory_utilization"].bounds(), required=False)
    dtype = serializers.ChoiceField(choices=Dtype.choices, required=False)


class ProfileFieldSerializer(serializers.Serializer):
    value = serializers.JSONField(allow_null=True)
    reason = serializers.CharField()


class PresetSerializer(serializers.Serializer):
    profile = serializers.ChoiceField(choices=PROFILES)
    label = serializers.CharField()
    summary = serializers.CharField()
    fields = serializers.DictField(
        child=ProfileFieldSerializer(), help_text=f"One entry per filled field: {', '.join(PROFILE_FIELDS)}."
    )
    notes = serializers.ListField(child=serializers.CharField())
    fits = serializers.BooleanField(help_text="False: no shape of this flavor holds the model.")
    suggested_flavor = serializers.CharField(
        allow_null=True, help_text="A spot-capable flavor your team may use (cost profile); never applied for you."
    )


class ServingProfilesView(APIView):
    """The serving profiles (throughput, latency, cost) for a model on a flavor in a tenant: the
    values each fills in a deployment request, and why. Another tenant's slug is a 404."""

    @extend_schema(parameters=[ProfileQuerySerializer], responses=PresetSerializer(many=True))
    def get(self, request):
        query = ProfileQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = dict(query.validated_data)
        tenant = get_object_or_404(Tenant.objects.visible_to(request.user), slug=data.pop("tenant"))
        flavor = get_object_or_404(GpuFlavor, name=data.pop("flavor"), active=True)
        backend = data.pop("backend", settings.RUNTIME_DEFAULT_BACKEND)
        room = room_for(tenant, flavor)
        wanted = [data.pop("profile")] if "profile" in data else list(PROFILES)
        presets = [profile_fields(p, draft=data, flavor=flavor, backend=backend, room=room) for p in wanted]
        return Response([preset.as_dict() for preset in presets])
