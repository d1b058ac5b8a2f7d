from django.urls import include, path

from deployments import views as deployment_views
from portal import readiness, views
from quotas import secret_views
from quotas import views as quota_views

urlpatterns = [
    path("", views.home, name="home"),
    path("approvals/", views.approvals, name="approvals"),
    path("cluster/", views.cluster, name="cluster"),
    path("cluster/readiness/", readiness.readiness_page, name="cluster-readiness-page"),
    path(
        "cluster/orphans/<str:backend>/<slug:namespace>/<str:name>/delete/",
        views.orphan_delete_view,
        name="orphan-delete",
    ),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<str:key>/revoke/", views.token_revoke_view, name="token-revoke"),
    path("", include("access.urls")),  # keys/, keys/new/, keys/<id>/revoke/
    path("", include("sharing.urls")),  # shared/: publish, subscribe, decide
    path("deployments/", deployment_views.deployment_list, name="deployment-list"),
    path("deployments/new/", deployment_views.deployment_new, name="deployment-new"),
    path("deployments/preview/", deployment_views.deployment_preview, name="deployment-preview"),
    path("deployments/profile/", deployment_views.deployment_profile, name="deployment-profile"),
    path("deployments/<int:pk>/", deployment_views.deployment_detail, name="deployment-detail"),
    path("deployments/<int:pk>/status/", deployment_views.deployment_status, name="deployment-status"),
    path("deployments/<int:pk>/badge/", deployment_views.deployment_badge, name="deployment-badge"),
    path("deployments/<int:pk>/try/", deployment_views.deployment_try, name="deployment-try"),
    path("", include("metrics.urls")),  # deployments/<int:pk>/charts/: before the action catch-all below
    path("", include("deployments.operating_urls")),  # phases/, timeline/, logs/: before the catch-all
    path("deployments/<int:pk>/manifest/", deployment_views.deployment_manifest, name="deployment-manifest"),
    path("deployments/<int:pk>/edit/", deployment_views.deployment_edit, name="deployment-edit"),
    path("deployments/<int:pk>/<str:action>/", deployment_views.deployment_action, name="deployment-action"),
    path("quotas/", quota_views.quota_overview, name="quota-overview"),
    path("quotas/<slug:slug>/", quota_views.tenant_quota, name="tenant-quota"),
    path("quota-requests/<int:pk>/<str:decision>/", quota_views.quota_request_decide, name="quota-decide"),
    path("quotas/<slug:slug>/storage/", secret_views.storage_set_view, name="tenant-storage-set"),
    path("quotas/<slug:slug>/credentials/<str:kind>/", secret_views.secret_set_view, name="tenant-secret-set"),
    path(
        "quotas/<slug:slug>/credentials/<str:kind>/delete/",
        secret_views.secret_delete_view,
        name="tenant-secret-delete",
    ),
    path("", include("usage.urls")),  # usage/, usage/export.csv
    path("", include("portal.platform_urls")),  # platform/…, tenants/<slug>/members/
]
