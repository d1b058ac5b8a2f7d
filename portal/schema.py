"""OpenAPI extensions (drf-spectacular): describe the portal's token authentication."""

from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from drf_spectacular.plumbing import build_bearer_security_scheme_object


class ApiTokenScheme(KnoxTokenScheme):
    """`Authorization: Token llmp_…` or `Authorization: Bearer llmp_…` (what OpenAI-style clients
    send) in the schema; spectacular matches classes exactly, so the knox extension does not cover
    our subclass by itself."""

    target_class = "portal.auth.TokenAuthentication"
    name = ["tokenAuth", "bearerAuth"]

    def get_security_definition(self, auto_schema):
        return [
            build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Token"),
            build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer"),
        ]

    def get_security_requirement(self, auto_schema):
        return [{"tokenAuth": []}, {"bearerAuth": []}]  # either prefix, not both
