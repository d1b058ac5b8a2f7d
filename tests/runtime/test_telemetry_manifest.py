"""The TelemetryPolicy that labels Limitador's counters per key, and how its series are read.

No TelemetryPolicy CRD is among ../shared/schemas/crds, so the render is checked here against
the rules its CRD states (Kuadrant/kuadrant-operator ae698811,
config/crd/bases/extensions.kuadrant.io_telemetrypolicies.yaml: `targetRef` group, kind and name
required, CEL rules `self.group == 'gateway.networking.k8s.io'` and `self.kind == 'Gateway'`;
`metrics.default.labels` a map of strings, required) and Prometheus's label-name syntax, which
Limitador's exporter would otherwise refuse to render.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from runtime.exposition.limitador import REFUSED, REQUESTS, TOKENS, counter_of
from runtime.manifests.gateway import KEY_COUNTER, published_key_id
from runtime.manifests.telemetry import (
    KEY_LABEL,
    MODEL_LABEL,
    SERVED_LABEL,
    render_telemetrypolicy,
    series_selector,
)
from runtime.manifests.tenant_route import MODEL_HEADER
from runtime.spec import GatewaySpec

DEPLOYED = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "gateway" / "telemetrypolicy.yaml"
GATEWAY = GatewaySpec(
    gateway_name="llm-gateway",
    gateway_namespace="gateway-system",
    public_url="https://llm.example.com",
    key_namespace="kuadrant-system",
)
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class TestPolicy:
    def test_the_platform_file_is_the_render_for_the_default_gateway(self) -> None:
        assert yaml.safe_load(DEPLOYED.read_text()) == render_telemetrypolicy(GATEWAY)

    def test_it_keeps_the_crds_rules(self) -> None:
        policy = render_telemetrypolicy(GATEWAY)
        assert policy["apiVersion"] == "extensions.kuadrant.io/v1alpha1" and policy["kind"] == "TelemetryPolicy"
        target = policy["spec"]["targetRef"]
        assert target == {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "llm-gateway"}
        assert DNS1123_SUBDOMAIN.match(policy["metadata"]["name"]) and len(policy["metadata"]["name"]) <= 253
        labels = policy["spec"]["metrics"]["default"]["labels"]
        assert labels and all(isinstance(k, str) and isinstance(v, str) and v for k, v in labels.items())
        # Prometheus label names, none of them reserved (`__`) or Limitador's own.
        for name in labels:
            assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name) and not name.startswith("__")
            assert name not in {"limitador_namespace", "limit_name"}

    def test_the_key_label_is_what_the_authpolicy_publishes_and_the_model_the_routers_header(self) -> None:
        labels = render_telemetrypolicy(GATEWAY)["spec"]["metrics"]["default"]["labels"]
        published = published_key_id()
        (filter_name,) = published
        (prop,) = published[filter_name]["json"]["properties"]
        assert labels[KEY_LABEL] == KEY_COUNTER == f"auth.{filter_name}.{prop}"
        assert labels[MODEL_LABEL] == "request.headers['x-gateway-model-name']"
        assert MODEL_HEADER.lower() == "x-gateway-model-name"
        assert labels[SERVED_LABEL] == 'responseBodyJSON("/model")'

    def test_another_gateway_gets_its_namespace_and_name(self) -> None:
        other = GatewaySpec("edge", "ingress", "https://x.example.com", "kuadrant-system")
        policy = render_telemetrypolicy(other)
        assert policy["metadata"]["namespace"] == "ingress" and policy["spec"]["targetRef"]["name"] == "edge"


class TestSeries:
    BASE = {"limitador_namespace": "alpha/chat-3", KEY_LABEL: "key-4", MODEL_LABEL: "chat"}

    def test_the_selector_takes_both_exporter_names_and_only_keyed_series(self) -> None:
        selector = series_selector()
        for name in ("authorized_hits", "authorized_hits_total", "limited_calls", "limited_calls_total"):
            assert re.search(rf"(^|[|\"]){name}([|\"]|$)", selector)
        assert f'{KEY_LABEL}!=""' in selector and "authorized_calls" not in selector

    @pytest.mark.parametrize(
        ("name", "extra", "kind"),
        [
            ("authorized_hits", {SERVED_LABEL: "chat"}, TOKENS),
            ("authorized_hits_total", {SERVED_LABEL: "chat"}, TOKENS),
            ("authorized_hits", {}, REQUESTS),
            ("limited_calls", {}, REFUSED),
            ("limited_calls_total", {SERVED_LABEL: "chat"}, REFUSED),
        ],
    )
    def test_each_series_says_what_it_counts(self, name, extra, kind) -> None:
        counter = counter_of({"__name__": name, **self.BASE, **extra}, "12")
        assert counter is not None
        assert (
            counter.kind,
            counter.route_namespace,
            counter.route_name,
            counter.key,
            counter.model,
            counter.value,
        ) == (
            kind,
            "alpha",
            "chat-3",
            "key-4",
            "chat",
            12.0,
        )

    def test_the_same_labels_are_the_same_series_and_any_other_label_another(self) -> None:
        one = counter_of({"__name__": "authorized_hits", **self.BASE}, "1")
        again = counter_of({"__name__": "authorized_hits", **self.BASE}, "9")
        replica = counter_of({"__name__": "authorized_hits", **self.BASE, "pod": "limitador-2"}, "1")
        assert one.series == again.series != replica.series

    @pytest.mark.parametrize(
        ("metric", "value"),
        [
            ({"__name__": "authorized_calls", **BASE}, "1"),  # not a series the portal counts
            ({"__name__": "authorized_hits", **{**BASE, KEY_LABEL: ""}}, "1"),
            ({"__name__": "authorized_hits", **{**BASE, "limitador_namespace": "no-slash"}}, "1"),
            ({"__name__": "authorized_hits", **{**BASE, "limitador_namespace": "/chat-3"}}, "1"),
            ({"__name__": "authorized_hits", **BASE}, "NaN"),
            ({"__name__": "authorized_hits", **BASE}, "+Inf"),
            ({"__name__": "authorized_hits", **BASE}, "-3"),
            ({"__name__": "authorized_hits", **BASE}, "lots"),
        ],
    )
    def test_anything_else_is_not_counted(self, metric, value) -> None:
        assert counter_of(metric, value) is None
