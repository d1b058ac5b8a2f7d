"""Browser URLs of the sharing app (included by portal/ui_urls.py)."""

from django.urls import path

from sharing import views

urlpatterns = [
    path("shared/", views.shared_models, name="shared-models"),
    path("shared/publish/", views.publish_view, name="shared-publish"),
    path("shared/publications/<int:pk>/unpublish/", views.unpublish_view, name="shared-unpublish"),
    path("shared/subscribe/", views.subscribe_view, name="shared-subscribe"),
    path("shared/subscriptions/<int:pk>/<slug:verb>/", views.decide_view, name="shared-decide"),
]
