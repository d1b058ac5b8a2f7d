from django.urls import include, path
from rest_framework.routers import DefaultRouter

from deployments.api.profiles import ServingProfilesView
from deployments.api.views import DeploymentViewSet
from portal.account_views import InvitationView
from portal.api import AuditEventViewSet, TokenViewSet, me
from portal.audit_api import AuditExportCsvView, AuditExportJsonLinesView
from portal.catalog_api import CatalogModelViewSet
from portal.cluster_api import ClusterReadinessView, ClusterSweepView, OrphanDeleteView
from portal.platform_api import TenantViewSet
from quotas.api.secret_views import (
    HfTokenCredentialView,
    S3CredentialView,
    TenantCredentialsView,
    TenantStorageView,
)
from quotas.api.views import (
    ClusterUsageView,
    GpuFlavorViewSet,
    PriorityTierViewSet,
    QuotaChangeRequestViewSet,
    QuotaPreviewView,
    TenantQuotaViewSet,
)


# No `.json` / `.api` suffix twins: clients pick JSON with the Accept header, and the action
# methods take no `format` argument (a suffixed action URL was a 500).
class ApiRouter(DefaultRouter):
    include_format_suffixes = False


router = ApiRouter()
router.register("tokens", TokenViewSet, basename="token")
router.register("tenants", TenantViewSet, basename="tenant")
router.register("audit", AuditEventViewSet, basename="audit")
router.register("flavors", GpuFlavorViewSet, basename="flavor")
router.register("priority-tiers", PriorityTierViewSet, basename="priority-tier")
router.register("quotas", TenantQuotaViewSet, basename="quota")
router.register("quota-requests", QuotaChangeRequestViewSet, basename="quota-request")
router.register("deployments", DeploymentViewSet, basename="deployment")
router.register("catalog/models", CatalogModelViewSet, basename="catalog-model")

urlpatterns = [
    path("me/", me, name="api-me"),
    path("quota-preview/", QuotaPreviewView.as_view(), name="quota-preview"),
    path("serving-profiles/", ServingProfilesView.as_view(), name="serving-profiles"),
    path("cluster/usage/", ClusterUsageView.as_view(), name="cluster-usage"),
    path("cluster/sweep/", ClusterSweepView.as_view(), name="cluster-sweep"),
    path("cluster/readiness/", ClusterReadinessView.as_view(), name="cluster-readiness"),
    path("cluster/orphans/delete/", OrphanDeleteView.as_view(), name="cluster-orphan-delete"),
    # Before the router's audit/<pk>/: "export" is not an id.
    path("audit/export/jsonl/", AuditExportJsonLinesView.as_view(), name="audit-export-jsonl"),
    path("audit/export/csv/", AuditExportCsvView.as_view(), name="audit-export-csv"),
    path("invitations/", InvitationView.as_view(), name="invitations"),
    # Beside the router's tenants/<slug>/…: the model-cache claim and the write-only credentials.
    path("tenants/<slug:slug>/storage/", TenantStorageView.as_view(), name="tenant-storage"),
    path("tenants/<slug:slug>/credentials/", TenantCredentialsView.as_view(), name="tenant-credentials"),
    path("tenants/<slug:slug>/credentials/hf_token/", HfTokenCredentialView.as_view(), name="tenant-credential-hf"),
    path("tenants/<slug:slug>/credentials/s3/", S3CredentialView.as_view(), name="tenant-credential-s3"),
    path("", include(router.urls)),
    path("", include("metrics.api.urls")),  # deployments/<id>/metrics/, summary/, advice/
    path("", include("deployments.api.operating_urls")),  # deployments/<id>/timeline/, phases/, logs/
    path("", include("deployments.api.revision_urls")),  # deployments/<id>/revisions/…
    path("", include("usage.api.urls")),  # usage/, usage/csv/, usage/budgets/
    path("", include("access.api.urls")),  # keys/: API keys for deployment endpoints
    path("", include("sharing.api.urls")),  # publications/, subscriptions/: shared models
]
