"""Platform administration pages (portal/platform_views.py)."""

from django.urls import path

from portal import catalog_views, tier_views
from portal import platform_views as views
from portal.account_views import invite

urlpatterns = [
    path("platform/", views.platform_home, name="platform"),
    path("platform/tenants/new/", views.tenant_new, name="platform-tenant-new"),
    path("platform/invite/", invite, name="platform-invite"),
    path("platform/tenants/<slug:slug>/", views.tenant_edit, name="platform-tenant"),
    path("platform/tenants/<slug:slug>/archive/", views.tenant_archive_confirm, name="platform-tenant-archive"),
    path("platform/flavors/new/", views.flavor_edit, name="platform-flavor-new"),
    path("platform/flavors/<slug:name>/", views.flavor_edit, name="platform-flavor"),
    path("platform/tiers/", tier_views.tier_list, name="platform-tiers"),
    path("platform/tiers/<slug:tier>/", tier_views.tier_edit, name="platform-tier"),
    path("platform/tiers/<slug:tier>/delete/", tier_views.tier_delete, name="platform-tier-delete"),
    path("platform/catalog/", catalog_views.catalog_list, name="platform-catalog"),
    path("platform/catalog/new/", catalog_views.catalog_edit, name="platform-catalog-new"),
    path("platform/catalog/<slug:name>/", catalog_views.catalog_edit, name="platform-catalog-model"),
    path(
        "platform/catalog/<slug:name>/deactivate/",
        catalog_views.catalog_deactivate,
        name="platform-catalog-deactivate",
    ),
    path(
        "platform/catalog/<slug:name>/import-facts/",
        catalog_views.catalog_import_facts,
        name="platform-catalog-import-facts",
    ),
    path("tenants/<slug:slug>/members/", views.tenant_members, name="tenant-members"),
    path(
        "tenants/<slug:slug>/members/<str:username>/",
        views.member_change,
        name="tenant-member-change",
    ),
]
