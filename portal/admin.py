"""Django admin for API tokens: read-only (only digests are stored; people revoke their own
tokens on the API tokens page or over the API)."""

from __future__ import annotations

from django.contrib import admin

from core.admin import ReadOnlyAdmin, register_remaining
from portal.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["token_key", "name", "user", "created", "expiry", "last_used"]
    search_fields = ["name", "token_key", "user__username"]
    list_select_related = ["user"]


register_remaining("portal")
