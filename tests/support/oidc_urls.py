"""The portal's URLs as they are with OIDC configured (portal/urls.py adds oidc/ when the
environment enables it at start-up; a test turns OIDC on after start-up)."""

from django.urls import include, path

from portal.urls import urlpatterns as portal_urlpatterns

urlpatterns = [path("oidc/", include("mozilla_django_oidc.urls")), *portal_urlpatterns]
