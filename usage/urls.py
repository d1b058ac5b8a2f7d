from django.urls import path

from usage import views

urlpatterns = [
    path("usage/", views.usage_report, name="usage"),
    path("usage/export.csv", views.usage_csv, name="usage-csv-download"),
]
