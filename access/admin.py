"""Django admin for API keys: read-only (minting and revoking go through access.services, which
lock, audit and publish; the key's digest is not shown)."""

from __future__ import annotations

from django.contrib import admin

from access.models import ApiKey
from core.admin import ReadOnlyAdmin


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    list_display = ["name", "prefix", "tenant", "deployment", "created_by", "expires_at", "revoked_at", "gateway_state"]
    list_filter = ["tenant", "gateway_state"]
    search_fields = ["name", "prefix", "tenant__slug"]
    list_select_related = ["tenant", "deployment", "created_by"]
    exclude = ["key_hash"]
