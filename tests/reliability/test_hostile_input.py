"""Hostile input. (1) Every string and number of a deployment spec ends up in Kubernetes labels,
YAML (serveConfigV2) or engine flags: hostile values get 400 with a message for that field,
nothing is written and no reconcile is scheduled. (2) schemathesis over /api/schema/: every
operation as a member and as a platform admin (real token header), no 5xx, responses conform."""

from __future__ import annotations

import json
import zlib

import hypothesis
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from deployments import services
from deployments.models import DeploymentEvent, ModelDeployment
from deployments.presenters import rendered_manifest
from portal.api import token_create
from portal.models import AuditEvent
from portal.wsgi import application
from quotas.models import QuotaReservation
from tests.deployments.factories import draft as model_draft
from tests.reliability.conftest import knob

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
STRING_FIELDS = ("name", "model_source", "served_model_name", "hf_token_secret", "flavor", "backend",
                 "quantization", "dtype", "tenant")
NUMBER_FIELDS = ("tensor_parallel_size", "pipeline_parallel_size", "min_replicas", "max_replicas",
                 "target_ongoing_requests", "max_model_len", "gpu_memory_utilization",
                 "max_num_batched_tokens", "parameter_count_b")
CASES = ([(f, k) for f in STRING_FIELDS for k in HOSTILE_STRINGS]
         + [(f, k) for f in NUMBER_FIELDS for k in HOSTILE_NUMBERS])


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
    return (ModelDeployment.objects.count(), DeploymentEvent.objects.count(), AuditEvent.objects.count(),
            QuotaReservation.objects.count())


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
            self, world, field, kind, django_capture_on_commit_callbacks):
        value = _value(kind)
        member = world.client("member")
        existing = services.deployment_create(tenant=world.alpha, user=world.users["member"],
                                              data=model_draft(world, name="existing"))
        manifest = rendered_manifest(existing)
        body = {**model_draft(world, name="hostile"), "flavor": "h100-sxm5", "tenant": "alpha", field: value}
        before = _snapshot()
        with django_capture_on_commit_callbacks() as scheduled:
            created = member.post("/api/v1/deployments/", _json(body), content_type="application/json")
            preview = member.post("/api/v1/deployments/preview/", _json(body), content_type="application/json")
            patched = (member.patch(f"/api/v1/deployments/{existing.pk}/", _json({field: value}),
                                    content_type="application/json")
                       if field not in ("name", "tenant") else None)  # not updatable: ignored on PATCH
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
SETTINGS = hypothesis.settings(max_examples=int(knob("REL_SCHEMA_EXAMPLES", 10)), deadline=None,
                               derandomize=True, suppress_health_check=list(hypothesis.HealthCheck),
                               database=None)


@pytest.fixture
def fuzz_world(world):
    """The world plus one object of each kind, so path parameters can name real objects.

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
        tenant=world.alpha, flavor=world.a100, user=world.users["tenant_admin"], nominal_gpus=6,
        justification="fuzz")
    tokens = {role: token_create(user=world.users[role], name="fuzz") for role in ("member", "platform_admin")}
    ids = {"id": None, "name": "a100-pcie", "slug": "alpha",
           "token_key": tokens["member"][0].token_key}
    objects = {"deployments": dep.pk, "quotas": TenantQuota.objects.filter(tenant=world.alpha).first().pk,
               "quota-requests": change.pk, "audit": AuditEvent.objects.filter(tenant=world.alpha).first().pk}
    yield {"headers": {role: {"Authorization": f"Token {secret}"} for role, (_, secret) in tokens.items()},
           "ids": ids, "objects": objects}
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
