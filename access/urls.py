"""Browser URLs of the access app (included by portal/ui_urls.py)."""

from django.urls import path

from access import views

urlpatterns = [
    path("keys/", views.key_list, name="keys"),
    path("keys/new/", views.key_new, name="key-new"),
    path("keys/<int:pk>/revoke/", views.key_revoke_view, name="key-revoke"),
]
