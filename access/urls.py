"""Browser URLs of the access app (included by portal/ui_urls.py)."""

from django.urls import path

from access import views

urlpatterns = [
    path("keys/", views.key_list, name="apikey-list"),
    path("keys/new/", views.key_new, name="apikey-new"),
    path("keys/<int:pk>/revoke/", views.key_revoke_view, name="apikey-revoke"),
]
