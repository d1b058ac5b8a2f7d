"""runtime.manifests.syntax against what Kubernetes answers.

Each table row is a value and whether the API server accepts it as that field, read off
kubernetes/apimachinery v0.34.1 pkg/util/validation/validation.go (IsDNS1123Label,
IsDNS1123Subdomain, IsDNS1035Label, IsQualifiedName, IsValidLabelValue) and, for effects,
kubernetes/kubernetes v1.34.1 pkg/apis/core/validation/validation.go (validateTaintEffect): the
boundary cases (63/64 characters, a trailing '-', an uppercase prefix, an empty prefix, two
slashes, a trailing newline, which Go's `$` refuses and Python's `$` alone would let through).
"""

from __future__ import annotations

import pytest

from runtime.manifests import syntax

LABEL_KEYS = [
    ("gpu", True),
    ("nvidia.com/gpu.product", True),
    ("kubernetes.io/hostname", True),
    ("Upper_Case.name-1", True),  # the name part may hold uppercase and '_'
    ("a" * 63, True),
    ("a" * 64, False),
    (f"{'p' * 253}/{'n' * 63}", True),
    (f"{'p' * 254}/n", False),
    (f"p/{'n' * 64}", False),
    ("Example.com/gpu", False),  # the prefix is a DNS subdomain: lowercase only
    ("example_com/gpu", False),
    ("example.com./gpu", False),
    ("/gpu", False),
    ("example.com/", False),
    ("a/b/c", False),
    ("gpu-", False),
    ("-gpu", False),
    (".gpu", False),
    ("gpu\n", False),
    ("bad key", False),
    ("", False),
    (None, False),
]

LABEL_VALUES = [
    ("", True),
    ("H100", True),
    ("p5.48xlarge", True),
    ("a_b-c.d", True),
    ("v" * 63, True),
    ("v" * 64, False),
    ("x-", False),
    ("-x", False),
    ("_x", False),
    ("x\n", False),
    ("a b", False),
    ("ü", False),
    (100, False),
]

DNS1123_LABELS = [
    ("a", True),
    ("0", True),
    ("tenant-1", True),
    ("a" * 63, True),
    ("a" * 64, False),
    ("a-", False),
    ("-a", False),
    ("A", False),
    ("a.b", False),
    ("a_b", False),
    ("a\n", False),
    ("", False),
]

DNS1035_LABELS = [("chat", True), ("c7b", True), ("7b-chat", False), ("chat-", False), ("Chat", False)]

DNS1123_SUBDOMAINS = [
    ("a", True),
    ("hf.token.v2", True),
    ("a" * 253, True),
    ("a" * 254, False),
    ("a..b", False),
    ("a.-b", False),
    ("a-.b", False),
    (".a", False),
    ("a.", False),
    ("A.b", False),
    ("a\n", False),
    ("", False),
]


@pytest.mark.parametrize(("key", "valid"), LABEL_KEYS)
def test_label_keys(key, valid):
    assert (syntax.label_key_problem(key) is None) is valid


@pytest.mark.parametrize(("value", "valid"), LABEL_VALUES)
def test_label_values(value, valid):
    assert (syntax.label_value_problem(value) is None) is valid


@pytest.mark.parametrize(("name", "valid"), DNS1123_LABELS)
def test_dns1123_labels(name, valid):
    assert (syntax.dns1123_label_problem(name) is None) is valid


@pytest.mark.parametrize(("name", "valid"), DNS1035_LABELS)
def test_dns1035_labels(name, valid):
    assert (syntax.dns1035_label_problem(name) is None) is valid


@pytest.mark.parametrize(("name", "valid"), DNS1123_SUBDOMAINS)
def test_dns1123_subdomains(name, valid):
    assert (syntax.dns1123_subdomain_problem(name) is None) is valid


@pytest.mark.parametrize(
    ("effect", "valid"),
    [("NoSchedule", True), ("PreferNoSchedule", True), ("NoExecute", True), ("", False), ("noschedule", False)],
)
def test_taint_effects(effect, valid):
    assert (syntax.taint_effect_problem(effect) is None) is valid


def test_a_shorter_bound_is_honoured_and_named():
    assert syntax.dns1123_label_problem("a" * 40, max_length=40) is None
    assert syntax.dns1123_label_problem("a" * 41, max_length=40) == "At most 40 characters (this one has 41)."


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("default", True),
        ("kube-system", True),
        ("kube-anything", True),
        ("keys", True),  # a platform namespace passed in
        ("kubeflow", False),  # only the "kube-" prefix is Kubernetes'
        ("team-a", False),
    ],
)
def test_tenant_namespaces_are_never_the_systems_or_the_platforms(name, refused):
    assert (syntax.tenant_namespace_problem(name, frozenset({"keys"})) is not None) is refused


def test_the_renderers_refuse_a_name_with_a_trailing_newline():
    from runtime.manifests.kserve import inferenceservice_name
    from runtime.manifests.rayservice import rayservice_name
    from runtime.spec import RenderError

    for render in (rayservice_name, inferenceservice_name):
        assert render("chat") == "chat"
        with pytest.raises(RenderError, match="DNS-1035"):
            render("chat\n")
