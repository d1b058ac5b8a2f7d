"""Hostile input. (1) Every string and number of a deployment spec ends up in Kubernetes labels,
YAML (serveConfigV2) or engine flags: hostile values get 400 with a message for that field,
nothing is written and no reconcile is scheduled. (2) schemathesis over /api/schema/: every
operation as a member and as a platform admin (real token header), no 5xx, responses conform."""

from __future__ import annotations

import io
import json
import zlib
from wsgiref.util import setup_testing_defaults

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from catalog.models import CatalogModel
from core.models import AuditEvent
from deployments import services
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.presenters import rendered_manifest
from portal.api import token_create
from portal.wsgi import application
from quotas.models import PriorityTier, QuotaReservation
from tests.reliability.conftest import knob
from tests.support.factories import draft as model_draft

NAN, INF, NINF = object(), object(), object()  # JSON literals NaN / Infinity / -Infinity
_LITERALS = {NAN: "NaN", INF: "Infinity", NINF: "-Infinity"}

HOSTILE_STRINGS = {
    "newline": "llama\nkind: Secret",
    "crlf": "llama\r\nX-Injected: 1",
    "yaml-doc": "a\n---\napiVersion: v1\nkind: Secret",
    "quotes": "ll\"a'ma",
    "unicode": "llamа-ünï",  # Cyrillic "а": looks like ASCII, is not
    "nul": "lla\x00ma",
    "10kB": "a" * 10_000,
    "shell": "$(reboot)",
    "leading-dash": "-llama",
}
HOSTILE_NUMBERS = {
    "negative": -1,
    "int64-min": -(2**63),
    "huge": 2**64,
    "googol": 10**100,
    "nan-literal": NAN,
    "inf-literal": INF,
    "-inf-literal": NINF,
    "nan-string": "NaN",
    "inf-string": "Infinity",
    "overflow-string": "1e309",
    "text": "12abc",
    "bool": True,
}
STRING_FIELDS = (
    "name",
    "model_source",
    "served_model_name",
    "hf_token_secret",
    "flavor",
    "backend",
    "quantization",
    "dtype",
    "tenant",
)
NUMBER_FIELDS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "min_replicas",
    "max_replicas",
    "target_ongoing_requests",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_batched_tokens",
    "parameter_count_b",
)
CASES = [(f, k) for f in STRING_FIELDS for k in HOSTILE_STRINGS] + [
    (f, k) for f in NUMBER_FIELDS for k in HOSTILE_NUMBERS
]


def _json(body: dict) -> str:
    """JSON with NaN/Infinity written as bare literals, as a hostile client would send them."""
    marks = {id(v): name for v, name in _LITERALS.items()}
    text = json.dumps({k: (f"@@{marks[id(v)]}@@" if id(v) in marks else v) for k, v in body.items()})
    for name in _LITERALS.values():
        text = text.replace(f'"@@{name}@@"', name)
    return text


def _value(kind: str):
    return HOSTILE_STRINGS.get(kind, HOSTILE_NUMBERS.get(kind))


def _snapshot():
    return (
        ModelDeployment.objects.count(),
        DeploymentEvent.objects.count(),
        AuditEvent.objects.count(),
        QuotaReservation.objects.count(),
    )


def _refused(response, field: str, value) -> None:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    body = response.json()
    if value in _LITERALS:  # not JSON at all: refused by the parser before any field is read
        assert "JSON parse error" in body["detail"]
    elif isinstance(value, str) and "\x00" in value and field in ("flavor", "tenant"):
        # DRF's related-field lookup hands the NUL to PostgreSQL, which cannot compare it: the
        # API's exception handler answers 400 (was a 500) without naming the field.
        assert body["code"] == "invalid" and body["detail"]
    else:
        assert field in body and body[field], body


class TestHostileFieldValues:
    @pytest.mark.parametrize(("field", "kind"), CASES, ids=[f"{f}-{k}" for f, k in CASES])
    def test_it_answers_400_for_the_field_and_writes_and_renders_nothing(
        self, world, field, kind, django_capture_on_commit_callbacks
    ):
        value = _value(kind)
        member = world.client("member")
        existing = services.deployment_create(
            tenant=world.alpha, user=world.users["member"], data=model_draft(world, name="existing")
        )
        manifest = rendered_manifest(existing)
        body = {**model_draft(world, name="hostile"), "flavor": "h100-sxm5", "tenant": "alpha", field: value}
        before = _snapshot()
        with django_capture_on_commit_callbacks() as scheduled:
            created = member.post("/api/v1/deployments/", _json(body), content_type="application/json")
            preview = member.post("/api/v1/deployments/preview/", _json(body), content_type="application/json")
            patched = (
                member.patch(
                    f"/api/v1/deployments/{existing.pk}/", _json({field: value}), content_type="application/json"
                )
                if field not in ("name", "tenant")
                else None
            )  # not updatable: ignored on PATCH
        _refused(created, field, value)
        if preview.status_code == 200:  # preview's contract: type errors 400, rule errors listed
            assert preview.json()["valid"] is False and field in preview.json()["errors"], preview.json()
        else:
            _refused(preview, field, value)
        if patched is not None:
            _refused(patched, field, value)
        assert _snapshot() == before  # nothing written
        assert scheduled == []  # no reconcile, no Kueue sync: nothing will be rendered or applied
        existing.refresh_from_db()
        assert existing.generation == 1 and rendered_manifest(existing) == manifest


# --- schemathesis over the served schema ----------------------------------------------------------

# Two loads of the same served schema: the default suite runs schemathesis's explicit examples and
# bounded fuzzing (REL_SCHEMA_EXAMPLES per operation); the slow variant adds the coverage phase,
# which walks every boundary and negative case the schema implies (unsupported methods, wrong
# types, missing fields…), unbounded by max_examples: ~5 min on 2 cores.
schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
schema.config.phases.update(phases=["examples", "fuzzing"])
full_schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
full_schema.config.phases.update(phases=["examples", "coverage", "fuzzing"])
# status_code_conformance is left out: drf-spectacular documents the success code only, so every
# (correct) 400/403/404/409 would count as "undocumented".
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
SETTINGS = hypothesis.settings(
    max_examples=int(knob("REL_SCHEMA_EXAMPLES", 10)),
    deadline=None,
    derandomize=True,
    suppress_health_check=list(hypothesis.HealthCheck),
    database=None,
)


@pytest.fixture
def fuzz_world(world, cluster_api):
    """The world plus one object of each kind, so path parameters can name real objects, and the
    API test server as the cluster (the tenant credentials are written in the request).

    Requests go straight to the WSGI app inside the test's transaction; like Django's test
    client, keep request start/finish from closing that connection (it would end the
    transaction and every later query would fail)."""
    from django.core import signals
    from django.db import close_old_connections

    from quotas import services as quota_services
    from quotas.models import TenantQuota

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=model_draft(world))
    change = quota_services.quota_change_request_create(
        tenant=world.alpha, flavor=world.a100, user=world.users["tenant_admin"], nominal_gpus=6, justification="fuzz"
    )
    tokens = {role: token_create(user=world.users[role], name="fuzz") for role in ("member", "platform_admin")}
    ids = {"id": None, "name": "a100-pcie", "slug": "alpha", "token_key": tokens["member"][0].token_key, "number": 1}
    objects = {
        "deployments": dep.pk,
        "quotas": TenantQuota.objects.filter(tenant=world.alpha).first().pk,
        "quota-requests": change.pk,
        "audit": AuditEvent.objects.filter(tenant=world.alpha).first().pk,
    }
    yield {
        "headers": {role: {"Authorization": f"Token {secret}"} for role, (_, secret) in tokens.items()},
        "ids": ids,
        "objects": objects,
    }
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def _real_path_parameters(case, fuzz_world) -> None:
    """Point half the cases at real objects (the other half keep schemathesis's random ids)."""
    if not case.path_parameters or zlib.crc32(json.dumps(case.path_parameters, default=str).encode()) % 2:
        return
    collection = case.operation.path.split("/")[3]
    for name in case.path_parameters:
        real = fuzz_world["objects"].get(collection) if name == "id" else fuzz_world["ids"].get(name)
        if real is not None:
            case.path_parameters[name] = real


def _call_as_member_and_admin(case, fuzz_world) -> None:
    from django.core.cache import cache

    cache.clear()  # throttles: fuzzing writes fast
    _real_path_parameters(case, fuzz_world)
    for role in ("member", "platform_admin"):
        case.call_and_validate(headers=fuzz_world["headers"][role], checks=CHECKS)


@schema.parametrize()
@SETTINGS
def test_api_fuzzing_gives_no_5xx_and_conforming_responses(case, fuzz_world):
    _call_as_member_and_admin(case, fuzz_world)


@pytest.mark.slow
@full_schema.parametrize()
@SETTINGS
def test_api_coverage_phase_gives_no_5xx_and_conforming_responses(case, fuzz_world):
    _call_as_member_and_admin(case, fuzz_world)


# --- hostile request bodies -----------------------------------------------------------------------
# The framing, not the fields: bodies no parser should take (too deep, too big, not the encoding
# they claim) get a 400 or 413 in JSON that says what is wrong, on every operation that reads a
# body, before any view code runs. A 500 here would be the client's fault reported as ours.

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
MULTIPART = "multipart/form-data; boundary=B"


def _multipart(name: str, value: bytes) -> bytes:
    return b'--B\r\nContent-Disposition: form-data; name="' + name.encode() + b'"\r\n\r\n' + value + b"\r\n--B--\r\n"


def hostile_bodies(limit: int) -> list[tuple[str, str, bytes, int, str]]:
    """(kind, Content-Type, body, expected status, words the answer must contain)."""
    return [
        ("nested-arrays", JSON, b"[" * 100_000 + b"]" * 100_000, 400, "nested"),
        ("nested-objects", JSON, b'{"a":' * 50_000 + b"1" + b"}" * 50_000, 400, "nested"),
        ("nested-in-a-field", JSON, b'{"name": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", 400, "nested"),
        ("oversized-json", JSON, b'{"name": "' + b"a" * limit + b'"}', 413, "too large"),
        ("oversized-form", FORM, b"name=" + b"a" * limit, 413, "too large"),
        ("oversized-multipart", MULTIPART, _multipart("name", b"a" * limit), 413, "too large"),
        ("invalid-utf8", JSON, b'{"name": "\xff\xfe"}', 400, "utf-8"),
        ("unknown-charset", f"{JSON}; charset=nope", b"{}", 400, "charset"),
        ("bytes-codec-charset", f"{JSON}; charset=bz2_codec", b"{}", 400, "charset"),
        ("invalid-json", JSON, b'{"name": ', 400, "json parse error"),
        (
            "lone-surrogate",
            JSON,
            b'{"name": "a\\ud800", "reason": "a\\ud800", "comment": "a\\ud800"}',
            400,
            "surrogate",
        ),
        ("form-bad-percent", FORM, b"name=%zz&reason=%", 400, "percent"),
        ("form-not-utf8", FORM, b"name=%ff%fe&reason=%ff", 400, "utf-8"),
        ("form-unknown-charset", f"{FORM}; charset=nope", b"name=a", 400, "charset"),
        ("form-bytes-codec-charset", f"{FORM}; charset=bz2_codec", b"name=a", 400, "charset"),
        ("form-too-many-fields", FORM, b"&".join(b"f%d=1" % i for i in range(2_000)), 400, "fields"),
        ("multipart-no-boundary", "multipart/form-data", _multipart("name", b"a"), 400, "boundary"),
        ("multipart-broken-boundary", 'multipart/form-data; boundary="', _multipart("name", b"a"), 400, "boundary"),
    ]


@pytest.fixture
def body_targets(world):
    """Every API operation that reads a request body, with real objects in its path, and the
    role allowed to reach its parser (a refused role is answered before the body is read)."""
    from access.services import key_mint
    from quotas import services as quota_services
    from quotas.models import TenantQuota

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=model_draft(world))
    change = quota_services.quota_change_request_create(
        tenant=world.alpha,
        flavor=world.a100,
        user=world.users["tenant_admin"],
        nominal_gpus=6,
        justification="hostile bodies",
    )
    quota = TenantQuota.objects.get(tenant=world.alpha, flavor=world.h100)
    key, _ = key_mint(user=world.users["member"], tenant=world.alpha, name="hostile bodies")
    catalog = CatalogModel.objects.create(name="hostile-cat", display_name="Cat", source="org/cat", revision="main")
    PriorityTier.objects.create(name="hostile-tier", display_name="Tier", value=10)
    from sharing.models import Publication, Subscription

    shared = Publication.objects.create(deployment=dep, to_all=True)
    asked = Subscription.objects.create(publication=shared, consumer=world.beta)
    return [
        ("member", "POST", "/api/v1/deployments/"),
        ("member", "PATCH", f"/api/v1/deployments/{dep.pk}/"),
        ("platform_admin", "POST", f"/api/v1/deployments/{dep.pk}/approve/"),
        ("platform_admin", "POST", f"/api/v1/deployments/{dep.pk}/reject/"),
        ("member", "POST", f"/api/v1/deployments/{dep.pk}/withdraw/"),
        ("platform_admin", "POST", f"/api/v1/deployments/{dep.pk}/revisions/1/approve/"),
        ("platform_admin", "POST", f"/api/v1/deployments/{dep.pk}/revisions/1/reject/"),
        ("member", "POST", f"/api/v1/deployments/{dep.pk}/scale/"),
        ("member", "POST", "/api/v1/deployments/preview/"),
        ("platform_admin", "POST", "/api/v1/flavors/"),
        ("platform_admin", "PUT", "/api/v1/flavors/h100-sxm5/"),
        ("platform_admin", "PATCH", "/api/v1/flavors/h100-sxm5/"),
        ("platform_admin", "POST", "/api/v1/priority-tiers/"),
        ("platform_admin", "PUT", "/api/v1/priority-tiers/hostile-tier/"),
        ("platform_admin", "PATCH", "/api/v1/priority-tiers/hostile-tier/"),
        ("tenant_admin", "POST", "/api/v1/quota-requests/"),
        ("platform_admin", "POST", f"/api/v1/quota-requests/{change.pk}/approve/"),
        ("platform_admin", "POST", f"/api/v1/quota-requests/{change.pk}/reject/"),
        ("platform_admin", "POST", f"/api/v1/quotas/{quota.pk}/set/"),
        ("member", "POST", "/api/v1/tokens/"),
        ("platform_admin", "POST", "/api/v1/cluster/orphans/delete/"),
        ("platform_admin", "POST", "/api/v1/quotas/"),
        ("platform_admin", "POST", "/api/v1/tenants/"),
        ("platform_admin", "PATCH", "/api/v1/tenants/alpha/"),
        ("platform_admin", "PUT", "/api/v1/tenants/alpha/policy/"),
        ("platform_admin", "POST", "/api/v1/tenants/alpha/archive/"),
        ("tenant_admin", "POST", "/api/v1/tenants/alpha/members/"),
        ("tenant_admin", "PATCH", "/api/v1/tenants/alpha/members/alpha-viewer/"),
        ("member", "POST", f"/api/v1/deployments/{dep.pk}/try/"),
        ("member", "PUT", f"/api/v1/deployments/{dep.pk}/objectives/"),
        ("member", "PATCH", f"/api/v1/deployments/{dep.pk}/objectives/"),
        ("member", "POST", "/api/v1/keys/"),
        ("member", "POST", f"/api/v1/keys/{key.pk}/revoke/"),
        ("platform_admin", "POST", "/api/v1/invitations/"),
        ("tenant_admin", "PUT", "/api/v1/tenants/alpha/credentials/hf_token/"),
        ("tenant_admin", "PUT", "/api/v1/tenants/alpha/credentials/s3/"),
        ("platform_admin", "PUT", "/api/v1/tenants/alpha/storage/"),
        ("platform_admin", "POST", "/api/v1/catalog/models/"),
        ("platform_admin", "PATCH", f"/api/v1/catalog/models/{catalog.name}/"),
        ("platform_admin", "POST", f"/api/v1/catalog/models/{catalog.name}/deactivate/"),
        ("platform_admin", "POST", f"/api/v1/catalog/models/{catalog.name}/import-facts/"),
        ("tenant_admin", "POST", "/api/v1/publications/"),
        ("member", "POST", "/api/v1/subscriptions/"),
        ("tenant_admin", "POST", f"/api/v1/subscriptions/{asked.pk}/approve/"),
        ("tenant_admin", "POST", f"/api/v1/subscriptions/{asked.pk}/limits/"),
    ]


BODY_TARGETS = 45  # len(body_targets): the test below holds the two together


def _template(path: str) -> str:
    """/api/v1/deployments/12/scale/ → /api/v1/deployments/{id}/scale/ (the schema's spelling);
    the number after revisions/ is {number}."""
    names = {
        "h100-sxm5": "{name}",
        "hostile-cat": "{name}",
        "hostile-tier": "{name}",
        "alpha": "{slug}",
        "alpha-viewer": "{username}",
    }
    parts = path.split("/")
    return "/".join(
        names.get(part, ("{number}" if parts[i - 1] == "revisions" else "{id}") if part.isdigit() else part)
        for i, part in enumerate(parts)
    )


class TestHostileBodies:
    def test_the_targets_are_every_operation_with_a_request_body(self, body_targets):
        from drf_spectacular.generators import SchemaGenerator

        paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
        with_body = {
            (method.upper(), path) for path, item in paths.items() for method, op in item.items() if "requestBody" in op
        }
        assert {(method, _template(path)) for _, method, path in body_targets} == with_body
        assert len(body_targets) == BODY_TARGETS

    @pytest.mark.parametrize("index", range(BODY_TARGETS), ids=lambda i: f"op{i}")
    def test_every_malformed_body_gets_a_json_400_or_413_naming_the_problem(self, world, body_targets, settings, index):
        role, method, path = body_targets[index]
        client = world.client(role)
        before = _snapshot()
        wrong = []
        for kind, content_type, body, status, words in hostile_bodies(settings.DATA_UPLOAD_MAX_MEMORY_SIZE):
            try:
                response = client.generic(method, path, body, content_type=content_type)
            except Exception as exc:  # noqa: BLE001 - the test client re-raises what became a 500
                wrong.append(f"{kind}: 500 ({type(exc).__name__}: {str(exc)[:80]})")
                continue
            if response.status_code != status or response.get("Content-Type") != "application/json":
                wrong.append(
                    f"{kind}: {response.status_code} {response.get('Content-Type')} {response.content[:120]!r}"
                )
            elif words not in json.dumps(response.json()).lower():
                wrong.append(f"{kind}: {response.json()} does not say {words!r}")
        assert wrong == [], f"{method} {path}:\n" + "\n".join(wrong)
        assert _snapshot() == before  # nothing written

    @pytest.mark.parametrize("index", range(BODY_TARGETS), ids=lambda i: f"op{i}")
    def test_a_json_body_that_is_not_an_object_gets_400(self, world, body_targets, index):
        role, method, path = body_targets[index]
        client = world.client(role)
        wrong = []
        for body in (b"[]", b'[{"name": "x"}]', b'"text"', b"null", b"1", b"true"):
            try:
                response = client.generic(method, path, body, content_type=JSON)
            except Exception as exc:  # noqa: BLE001 - the test client re-raises what became a 500
                wrong.append(f"{body!r}: 500 ({type(exc).__name__})")
                continue
            said = json.dumps(response.json()).lower() if response.status_code == 400 else ""
            if "expected a dictionary" not in said and "no data provided" not in said:
                wrong.append(f"{body!r}: {response.status_code} {response.content[:160]!r}")
        assert wrong == [], f"{method} {path}:\n" + "\n".join(wrong)


UI_FRAMING_ERRORS = {
    "oversized-form",
    "oversized-multipart",
    "form-too-many-fields",
    "form-unknown-charset",
    "form-bytes-codec-charset",
    "bytes-codec-charset",
    "unknown-charset",
    "multipart-no-boundary",
}


@pytest.fixture
def ui_targets(world):
    """Every browser view that reads a POST body, with the role that reaches it and whether the
    view answers a form it cannot accept with 400 (the page again, with the form's errors)."""
    from quotas import services as quota_services

    dep = services.deployment_create(tenant=world.alpha, user=world.users["member"], data=model_draft(world))
    change = quota_services.quota_change_request_create(
        tenant=world.alpha,
        flavor=world.a100,
        user=world.users["tenant_admin"],
        nominal_gpus=6,
        justification="hostile bodies",
    )
    return [
        ("member", "/deployments/new/", False),
        ("member", "/deployments/preview/", False),
        ("member", "/deployments/profile/", False),
        ("member", f"/deployments/{dep.pk}/scale/", False),
        ("member", f"/deployments/{dep.pk}/try/", False),
        # A decision without the revision it names: the detail page again, 400, the form's errors.
        ("platform_admin", f"/deployments/{dep.pk}/approve/", True),
        ("member", "/tokens/", False),
        ("tenant_admin", "/quotas/alpha/", False),
        ("platform_admin", f"/quota-requests/{change.pk}/reject/", False),
        ("anonymous", "/accounts/login/", False),
    ]


class TestHostileBodiesInTheBrowser:
    @pytest.mark.parametrize("index", range(10), ids=lambda i: f"view{i}")
    def test_no_body_makes_a_view_fail_and_broken_framing_gets_400(self, world, ui_targets, settings, index):
        role, path, form_400 = ui_targets[index]
        client = world.browser(role)
        wrong = []
        for kind, content_type, body, _, _ in hostile_bodies(settings.DATA_UPLOAD_MAX_MEMORY_SIZE):
            try:
                response = client.generic("POST", path, body, content_type=content_type)
            except Exception as exc:  # noqa: BLE001 - the test client re-raises what became a 500
                wrong.append(f"{kind}: 500 ({type(exc).__name__}: {str(exc)[:80]})")
                continue
            if response.status_code >= 500 or (form_400 or kind in UI_FRAMING_ERRORS) != (response.status_code == 400):
                wrong.append(f"{kind}: {response.status_code}")
        assert wrong == [], f"POST {path}:\n" + "\n".join(wrong)

    def test_a_bad_charset_on_a_get_is_a_400_in_the_api_and_the_ui(self, world):
        for path in ("/api/v1/deployments/", "/deployments/"):
            client = world.client("member") if path.startswith("/api/") else world.browser("member")
            for charset in ("bz2_codec", "nope"):
                response = client.generic("GET", path, "x", content_type=f"text/plain; charset={charset}")
                assert response.status_code == 400, (path, charset, response.status_code)
                assert charset in response.content.decode()
        answer = world.client("member").generic(
            "GET", "/api/v1/deployments/", "", content_type="text/plain; charset=nope"
        )
        assert answer.json()["code"] == "unsupported_charset"


def _wsgi_get(app, path: str, content_type: str) -> tuple[str, bytes]:
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "state=ready", "CONTENT_TYPE": content_type}
    setup_testing_defaults(environ)
    started = []
    body = b"".join(app(environ, lambda status, headers, exc_info=None: started.append(status)))
    return started[0], body


class TestCharsetBeforeDjangoBuildsTheRequest:
    """With a query string, Django decodes request.GET with the Content-Type's charset while it
    builds the request, before any middleware: only a WSGI wrapper can answer it."""

    def test_django_alone_cannot_build_such_a_request(self):
        from django.core.handlers.wsgi import WSGIRequest

        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": "/",
            "QUERY_STRING": "state=ready",
            "CONTENT_TYPE": "text/plain; charset=bz2_codec",
            "wsgi.input": io.BytesIO(),
        }
        setup_testing_defaults(environ)
        with pytest.raises(LookupError):
            WSGIRequest(environ)

    def test_the_guard_answers_400_naming_the_charset(self):
        from portal.middleware import CharsetGuard

        def django(environ, start_response):  # what stands behind the guard: never reached here
            raise AssertionError("the request reached Django")

        status, body = _wsgi_get(CharsetGuard(django), "/api/v1/deployments/", "text/plain; charset=bz2_codec")
        assert status.startswith("400") and json.loads(body)["code"] == "unsupported_charset"
        status, body = _wsgi_get(CharsetGuard(django), "/deployments/", "text/plain; charset=nope")
        assert status.startswith("400") and b'"nope"' in body

    def test_the_served_application_is_guarded(self):
        from portal.middleware import CharsetGuard

        assert isinstance(application, CharsetGuard)
