from django.urls import path

from usage.api.views import UsageBudgetsView, UsageCsvView, UsageReportView

urlpatterns = [
    path("usage/", UsageReportView.as_view(), name="usage-report"),
    path("usage/csv/", UsageCsvView.as_view(), name="usage-csv"),
    path("usage/budgets/", UsageBudgetsView.as_view(), name="usage-budgets"),
]
