"""SCIM 2.0 over HTTP (RFC 7644) at /scim/v2/: thin views around portal.scim's services.

Only the identity provider calls these: its bearer token (SCIM_BEARER_TOKEN_FILE), compared in
constant time; no session and no portal API token is accepted. Not configured: every path is a 404.
Every refusal is a SCIM error (urn:ietf:params:scim:api:messages:2.0:Error) with its status and,
for a 400 or 409, its scimType. Resource bodies (POST, PUT) may carry attributes the portal does
not keep (the provider sends the whole user): those are ignored. A PATCH path or a filter that
names an attribute the portal does not know is refused (invalidPath, invalidFilter).
"""

from __future__ import annotations

import hmac
import json
import re

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from core.exceptions import ConflictError, DomainError
from portal import scim_schema as schema
from portal.models import ScimGroup
from portal.scim import scim_group_change, scim_group_create, scim_group_delete, scim_user_create, scim_user_update

CONTENT_TYPE = "application/scim+json"


class ScimError(Exception):
    """A refusal in SCIM's words: the HTTP status, the scimType (400 and 409) and a detail."""

    def __init__(self, status: int, detail: str, scim_type: str | None = None):
        super().__init__(detail)
        self.status, self.detail, self.scim_type = status, detail, scim_type


def scim_response(doc: dict | None, status: int = 200, location: str | None = None) -> HttpResponse:
    response = HttpResponse(b"" if doc is None else json.dumps(doc), status=status, content_type=CONTENT_TYPE)
    if location:
        response["Location"] = location
    return response


def error_response(error: ScimError) -> HttpResponse:
    doc = {"schemas": [schema.ERROR], "status": str(error.status), "detail": error.detail}
    if error.scim_type:
        doc["scimType"] = error.scim_type
    response = scim_response(doc, error.status)
    if error.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="scim"'
    return response


def _authorize(request) -> None:
    token = settings.SCIM_BEARER_TOKEN
    if not token:
        raise ScimError(404, "Not found.")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise ScimError(401, "The identity provider's bearer token is required.")


@method_decorator(csrf_exempt, name="dispatch")
class ScimView(View):
    """Authentication, and every failure as a SCIM error (never an HTML page or a 500)."""

    def dispatch(self, request, *args, **kwargs):
        try:
            _authorize(request)
            return super().dispatch(request, *args, **kwargs)
        except ScimError as error:
            return error_response(error)
        except ConflictError as error:
            return error_response(ScimError(409, error.message, "uniqueness"))
        except DomainError as error:
            return error_response(ScimError(400, error.message, "invalidValue"))
        except RequestDataTooBig:
            return error_response(ScimError(413, "The request body is too large."))

    def http_method_not_allowed(self, request, *args, **kwargs):
        raise ScimError(405, f"{request.method} is not supported here.")

    def body(self) -> dict:
        """The JSON object in the request body; every string in it storable text."""
        try:
            doc = json.loads(self.request.body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise ScimError(400, "The body is not JSON.", "invalidSyntax") from None
        if not isinstance(doc, dict):
            raise ScimError(400, "The body must be a JSON object.", "invalidSyntax")
        if not all(storable(text) for text in strings_in(doc)):
            raise ScimError(400, "Text holds a NUL character or an unpaired surrogate.", "invalidValue")
        return doc


def strings_in(doc):
    """Every string in a parsed JSON document, keys included (iteratively: nesting can be deep)."""
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def storable(text: str) -> bool:
    """PostgreSQL text holds no NUL, and UTF-8 no lone surrogate (JSON's "\\ud800" makes one)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _page(request) -> tuple[int, int]:
    try:
        start = int(request.GET.get("startIndex", 1))
        count = int(request.GET.get("count", schema.MAX_RESULTS))
    except ValueError:
        raise ScimError(400, "startIndex and count are whole numbers.", "invalidValue") from None
    # Past any row count is an empty page (and no OFFSET beyond PostgreSQL's bigint).
    return min(max(start, 1), 2**31), min(max(count, 0), schema.MAX_RESULTS)


def list_response(request, queryset, render) -> HttpResponse:
    """One page of `queryset` as a SCIM ListResponse."""
    start, count = _page(request)
    rows = list(queryset[start - 1 : start - 1 + count])
    return scim_response(
        {
            "schemas": [schema.LIST],
            "totalResults": queryset.count(),
            "startIndex": start,
            "itemsPerPage": len(rows),
            "Resources": [render(request, row) for row in rows],
        }
    )


def object_or_404(queryset, pk: str):
    row = queryset.filter(pk=int(pk)).first() if pk.isascii() and pk.isdigit() and len(pk) < 19 else None
    if row is None:
        raise ScimError(404, f"No resource with id {pk!r}.")
    return row


def member_ids(value) -> list[int]:
    """The user ids in a members list ([{"value": "12"}, ...])."""
    if not isinstance(value, list):
        raise ScimError(400, "members must be a list.", "invalidValue")
    ids = []
    for member in value:
        raw = member.get("value") if isinstance(member, dict) else None
        if not isinstance(raw, str | int) or not str(raw).isascii() or not str(raw).isdigit() or len(str(raw)) > 18:
            raise ScimError(400, "Each member is {'value': '<user id>'}.", "invalidValue")
        ids.append(int(raw))
    return ids


class ServiceProviderConfigView(ScimView):
    def get(self, request):
        return scim_response(schema.service_provider_config(request))


class ResourceTypesView(ScimView):
    def get(self, request, name: str | None = None):
        types = schema.resource_types(request)
        if name is None:
            return scim_response({"schemas": [schema.LIST], "totalResults": len(types), "Resources": types})
        found = [t for t in types if t["id"] == name]
        if not found:
            raise ScimError(404, f"No resource type {name!r}.")
        return scim_response(found[0])


class SchemasView(ScimView):
    def get(self, request, uri: str | None = None):
        schemas = schema.schemas(request)
        if uri is None:
            return scim_response({"schemas": [schema.LIST], "totalResults": len(schemas), "Resources": schemas})
        found = [s for s in schemas if s["id"] == uri]
        if not found:
            raise ScimError(404, f"No schema {uri!r}.")
        return scim_response(found[0])


def users():
    return get_user_model().objects.order_by("pk")


def groups():
    return ScimGroup.objects.order_by("pk")


FILTER = re.compile(r'^\s*([A-Za-z][\w.:]*)\s+eq\s+("(?:[^"\\]|\\.)*")\s*$', re.IGNORECASE)
FILTER_MAX = 1000


def filtered(request, queryset, attributes: dict[str, str]):
    """`queryset` narrowed by the request's filter: only `attribute eq "value"` (RFC 7644
    §3.4.2.2), on the attributes named (lower-cased SCIM name → model field)."""
    text = request.GET.get("filter")
    if text is None:
        return queryset
    match = FILTER.match(text) if len(text) <= FILTER_MAX else None
    if match is None:
        raise ScimError(400, 'Only filters of the form attribute eq "value" are supported.', "invalidFilter")
    field = attributes.get(match[1].lower())
    if field is None:
        raise ScimError(400, f"Cannot filter on {match[1]!r}.", "invalidFilter")
    try:
        value = json.loads(match[2])
    except ValueError:
        raise ScimError(400, "The filter's value is not a valid string.", "invalidFilter") from None
    if not storable(value):
        return queryset.none()  # nothing stored holds such text
    return queryset.filter(**{field: value})


def as_bool(value) -> bool:
    # Entra ID sends "True"/"False" strings in PATCH operations.
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ScimError(400, "active is true or false.", "invalidValue")
    return value


def primary_email(value) -> str:
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise ScimError(400, "emails is a list of {'value': ...}.", "invalidValue")
    chosen = next((e for e in value if e.get("primary") is True), value[0] if value else {})
    address = chosen.get("value") or ""
    if not isinstance(address, str):
        raise ScimError(400, "An e-mail address is a string.", "invalidValue")
    return address


def user_changes(doc: dict, *, strict: bool) -> dict:
    """Model fields from a User resource's attributes (names ignore case, as SCIM's do). `strict`
    (PATCH): an attribute the portal does not know is refused; otherwise it is ignored."""
    changes = {}
    for key, value in doc.items():
        key = key.lower()
        if key == "username":
            changes["username"] = value
        elif key == "active":
            changes["is_active"] = as_bool(value)
        elif key == "emails":
            changes["email"] = primary_email(value)
        elif key == "name":
            if not isinstance(value, dict):
                raise ScimError(400, "name is an object.", "invalidValue")
            changes.update(user_changes({f"name.{k}": v for k, v in value.items()}, strict=strict))
        elif key in NAME_PARTS:
            changes[NAME_PARTS[key]] = value if value is not None else ""
        elif strict and key not in IGNORED:
            raise ScimError(400, f"Unknown attribute {key!r}.", "invalidPath")
    return changes


NAME_PARTS = {"name.givenname": "first_name", "name.familyname": "last_name"}
# Known to SCIM and sent by providers, but derived or not kept here: accepted and ignored.
IGNORED = {"schemas", "id", "meta", "externalid", "displayname", "name.formatted", "groups"}
WORK_EMAIL = 'emails[type eq "work"].value'


def user_patch(operations) -> dict:
    """The changes a PATCH's Operations make to a user, in order."""
    changes: dict = {}
    for op, path, value in operations_of(operations):
        if path is None:
            if op == "remove" or not isinstance(value, dict):
                raise ScimError(
                    400, "Without a path, an operation adds or replaces an object of attributes.", "noTarget"
                )
            changes.update(user_changes(value, strict=True))
            continue
        path = " ".join(path.split()).lower()
        if path == WORK_EMAIL.lower():
            path, value = "emails", [{"value": value}] if op != "remove" else []
        if op == "remove":
            if path not in ("emails", *NAME_PARTS):
                raise ScimError(400, f"{path!r} cannot be removed.", "mutability")
            value = [] if path == "emails" else None
        changes.update(user_changes({path: value}, strict=True))
    return changes


def operations_of(operations):
    """(op, path, value) of each PATCH operation, op lower-cased."""
    if not isinstance(operations, list) or not operations:
        raise ScimError(400, "Operations is a non-empty list.", "invalidSyntax")
    for operation in operations:
        op = operation.get("op") if isinstance(operation, dict) else None
        path = operation.get("path") if isinstance(operation, dict) else None
        if not isinstance(op, str) or op.lower() not in ("add", "remove", "replace"):
            raise ScimError(400, "Each operation's op is add, remove or replace.", "invalidSyntax")
        if path is not None and not isinstance(path, str):
            raise ScimError(400, "path is a string.", "invalidPath")
        yield op.lower(), path, operation.get("value")


class UsersView(ScimView):
    """/Users: the list (filter userName eq "…") and account creation."""

    def get(self, request):
        queryset = filtered(request, users(), {"username": "username"})
        return list_response(request, queryset, schema.user_resource)

    def post(self, request):
        user = scim_user_create(changes=user_changes(self.body(), strict=False))
        doc = schema.user_resource(request, user)
        return scim_response(doc, 201, doc["meta"]["location"])


class UserView(ScimView):
    """/Users/<id>: read, replace (PUT), change (PATCH); DELETE deactivates."""

    def get(self, request, pk: str):
        return scim_response(schema.user_resource(request, object_or_404(users(), pk)))

    def put(self, request, pk: str):
        return self._change(request, pk, user_changes(self.body(), strict=False))

    def patch(self, request, pk: str):
        return self._change(request, pk, user_patch(self.body().get("Operations")))

    def delete(self, request, pk: str):
        scim_user_update(user_id=object_or_404(users(), pk).pk, changes={"is_active": False})
        return scim_response(None, 204)

    def _change(self, request, pk: str, changes: dict):
        user = scim_user_update(user_id=object_or_404(users(), pk).pk, changes=changes)
        return scim_response(schema.user_resource(request, user))


MEMBER_FILTER = re.compile(r'^members\[value eq "(\d{1,18})"\]$', re.IGNORECASE)


def group_patch(operations) -> tuple[str | None, list]:
    """The new display name (or None) and the member steps of a group PATCH, in order."""
    name, steps = None, []
    for op, path, value in operations_of(operations):
        norm = " ".join(path.split()) if path is not None else None
        if norm is None and isinstance(value, dict) and op != "remove":
            for key, item in value.items():
                if key.lower() == "displayname":
                    name = item
                elif key.lower() == "members":
                    steps.append((op, member_ids(item)))
                elif key.lower() not in IGNORED:
                    raise ScimError(400, f"Unknown attribute {key!r}.", "invalidPath")
        elif norm is not None and norm.lower() == "members":
            removes_all = op == "remove" and value is None
            steps.append(("replace", []) if removes_all else (op, member_ids(value)))
        elif norm is not None and op == "remove" and MEMBER_FILTER.match(norm):
            steps.append(("remove", [int(MEMBER_FILTER.match(norm)[1])]))
        elif norm is not None and norm.lower() == "displayname" and op != "remove":
            name = value
        elif norm is not None and norm.lower() == "externalid":
            continue
        else:
            raise ScimError(400, f"Cannot {op} {path!r} of a group.", "invalidPath" if path else "noTarget")
    return name, steps


def _with_members(request) -> bool:
    excluded = request.GET.get("excludedAttributes", "").lower().replace(" ", "").split(",")
    return "members" not in excluded


class GroupsView(ScimView):
    """/Groups: the list (filter displayName eq "…") and group creation."""

    def get(self, request):
        queryset = filtered(request, groups(), {"displayname": "display_name"})
        members = _with_members(request)
        return list_response(request, queryset, lambda r, g: schema.group_resource(r, g, members=members))

    def post(self, request):
        body = self.body()
        fields = {k.lower(): v for k, v in body.items()}
        group = scim_group_create(
            display_name=fields.get("displayname"),
            external_id=fields.get("externalid") or "",
            member_ids=member_ids(fields.get("members", [])),
        )
        doc = schema.group_resource(request, group)
        return scim_response(doc, 201, doc["meta"]["location"])


class GroupView(ScimView):
    """/Groups/<id>: read, replace (PUT), change (PATCH: members add/remove/replace), delete."""

    def get(self, request, pk: str):
        group = object_or_404(groups(), pk)
        return scim_response(schema.group_resource(request, group, members=_with_members(request)))

    def put(self, request, pk: str):
        fields = {k.lower(): v for k, v in self.body().items()}
        steps = [("replace", member_ids(fields.get("members", [])))]
        return self._change(request, pk, fields.get("displayname"), steps)

    def patch(self, request, pk: str):
        name, steps = group_patch(self.body().get("Operations"))
        return self._change(request, pk, name, steps)

    def delete(self, request, pk: str):
        scim_group_delete(group_id=object_or_404(groups(), pk).pk)
        return scim_response(None, 204)

    def _change(self, request, pk: str, name, steps):
        group = scim_group_change(group_id=object_or_404(groups(), pk).pk, display_name=name, steps=steps)
        return scim_response(schema.group_resource(request, group, members=_with_members(request)))
