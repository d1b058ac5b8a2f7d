"""Browser routes for a deployment's revisions and the actions that ask for a confirmation first.

Included before portal.ui_urls, whose catch-all `deployments/<pk>/<action>/` would take them.
"""

from django.urls import path

from deployments import views

urlpatterns = [
    path("deployments/<int:pk>/revisions/", views.deployment_revisions, name="deployment-revisions"),
    path("deployments/<int:pk>/revisions/diff/", views.deployment_revision_diff, name="deployment-revision-diff"),
    # GET: a confirmation page; POST (its button): the action itself, as deployment-action does it.
    # The API's POST …/stop/ and …/cancel/ stay one call (deployments.api).
    path("deployments/<int:pk>/cancel/", views.deployment_confirm, {"action": "cancel"}, name="deployment-cancel"),
    path("deployments/<int:pk>/stop/", views.deployment_confirm, {"action": "stop"}, name="deployment-stop"),
    path("deployments/<int:pk>/delete/", views.deployment_confirm, {"action": "delete"}, name="deployment-delete"),
    path(
        "deployments/<int:pk>/withdraw/", views.deployment_confirm, {"action": "withdraw"}, name="deployment-withdraw"
    ),
]
