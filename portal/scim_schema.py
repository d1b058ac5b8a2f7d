"""What the SCIM endpoints say about themselves (RFC 7643 §5–7) and how a user or a group looks
as a SCIM resource. No logic: portal.scim_views serves these."""

from __future__ import annotations

from django.urls import reverse

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
LIST = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"
MAX_RESULTS = 100  # one page of a list at most


def _url(request, name: str, *args) -> str:
    return request.build_absolute_uri(reverse(name, args=args))


def user_resource(request, user) -> dict:
    """A portal account as a SCIM User."""
    doc = {
        "schemas": [USER],
        "id": str(user.pk),
        "userName": user.username,
        "name": {"givenName": user.first_name, "familyName": user.last_name},
        "displayName": user.get_full_name() or user.username,
        "active": user.is_active,
        "emails": [{"value": user.email, "type": "work", "primary": True}] if user.email else [],
        "groups": [{"value": str(g.pk), "display": g.display_name} for g in user.scim_groups.order_by("pk")],
        "meta": {
            "resourceType": "User",
            "created": user.date_joined.isoformat(),
            "location": _url(request, "scim-user", user.pk),
        },
    }
    return doc


def group_resource(request, group, *, members: bool = True) -> dict:
    """A SCIM group (its members unless the request left them out)."""
    doc = {
        "schemas": [GROUP],
        "id": str(group.pk),
        "displayName": group.display_name,
        "meta": {
            "resourceType": "Group",
            "created": group.created.isoformat(),
            "lastModified": group.modified.isoformat(),
            "location": _url(request, "scim-group", group.pk),
        },
    }
    if group.external_id:
        doc["externalId"] = group.external_id
    if members:
        doc["members"] = [
            {"value": str(u.pk), "display": u.username, "$ref": _url(request, "scim-user", u.pk)}
            for u in group.members.order_by("pk")
        ]
    return doc


def service_provider_config(request) -> dict:
    return {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"],
        "documentationUri": "https://datatracker.ietf.org/doc/html/rfc7644",
        "patch": {"supported": True},
        "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": True, "maxResults": MAX_RESULTS},
        "changePassword": {"supported": False},
        "sort": {"supported": False},
        "etag": {"supported": False},
        "authenticationSchemes": [
            {
                "type": "oauthbearertoken",
                "name": "Bearer token",
                "description": "The token in SCIM_BEARER_TOKEN_FILE.",
                "primary": True,
            }
        ],
        "meta": {"resourceType": "ServiceProviderConfig", "location": _url(request, "scim-config")},
    }


def resource_types(request) -> list[dict]:
    return [
        {
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:ResourceType"],
            "id": kind,
            "name": kind,
            "endpoint": f"/{kind}s",
            "schema": uri,
            "meta": {"resourceType": "ResourceType", "location": _url(request, "scim-resource-type", kind)},
        }
        for kind, uri in (("User", USER), ("Group", GROUP))
    ]


def _attribute(name: str, kind: str = "string", **extra) -> dict:
    return {
        "name": name,
        "type": kind,
        "multiValued": False,
        "required": False,
        "caseExact": False,
        "mutability": "readWrite",
        "returned": "default",
        "uniqueness": "none",
        **extra,
    }


def schemas(request) -> list[dict]:
    user_attributes = [
        _attribute("userName", required=True, uniqueness="server"),
        _attribute(
            "name",
            "complex",
            subAttributes=[_attribute("givenName"), _attribute("familyName")],
        ),
        _attribute("displayName", mutability="readOnly"),
        _attribute("active", "boolean"),
        _attribute(
            "emails", "complex", multiValued=True, subAttributes=[_attribute("value"), _attribute("primary", "boolean")]
        ),
        _attribute("groups", "complex", multiValued=True, mutability="readOnly"),
    ]
    group_attributes = [
        _attribute("displayName", required=True, uniqueness="server"),
        _attribute("members", "complex", multiValued=True, subAttributes=[_attribute("value"), _attribute("display")]),
    ]
    return [
        {
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Schema"],
            "id": uri,
            "name": kind,
            "attributes": attributes,
            "meta": {"resourceType": "Schema", "location": _url(request, "scim-schema", uri)},
        }
        for kind, uri, attributes in (("User", USER, user_attributes), ("Group", GROUP, group_attributes))
    ]
