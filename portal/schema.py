"""OpenAPI extensions (drf-spectacular): describe the portal's token authentication."""

from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme


class ApiTokenScheme(KnoxTokenScheme):
    """`Authorization: Token llmp_…` in the schema; spectacular matches classes exactly, so the
    knox extension does not cover our subclass by itself."""

    target_class = "portal.auth.TokenAuthentication"
    name = "tokenAuth"
