"""/scim/v2/: SCIM 2.0 provisioning for the identity provider (portal.scim_views)."""

from django.urls import path

from portal import scim_views as views

urlpatterns = [
    path("ServiceProviderConfig", views.ServiceProviderConfigView.as_view(), name="scim-config"),
    path("ResourceTypes", views.ResourceTypesView.as_view(), name="scim-resource-types"),
    path("ResourceTypes/<str:name>", views.ResourceTypesView.as_view(), name="scim-resource-type"),
    path("Schemas", views.SchemasView.as_view(), name="scim-schemas"),
    path("Schemas/<str:uri>", views.SchemasView.as_view(), name="scim-schema"),
    path("Users", views.UsersView.as_view(), name="scim-users"),
    path("Users/<str:pk>", views.UserView.as_view(), name="scim-user"),
    path("Groups", views.GroupsView.as_view(), name="scim-groups"),
    path("Groups/<str:pk>", views.GroupView.as_view(), name="scim-group"),
]
