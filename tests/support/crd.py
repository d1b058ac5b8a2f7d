"""Validate rendered objects against the real CRD schemas in ../shared/schemas/crds.

Three checks, because a real API server does three things with a custom object:

1. `validate` — JSON-Schema validation of the served version's `openAPIV3Schema`: types,
   required fields, enums, patterns, int-or-string quantities. A failure here is what the
   API server would answer with 422.
2. `unknown_fields` — every field path in the object must exist in the schema. The API
   server *prunes* unknown fields silently (structural schemas), so a misspelt field is
   accepted and then simply missing: no error, just a manifest that does less than it says.

3. `cel_check` — the CRD's own `x-kubernetes-validations` (CEL) rules, evaluated with
   cel-python: the schema is walked alongside the object and each rule at a node the object
   reaches runs with `self` bound to the value there (schema defaults applied first, as the
   API server does). Rules cel-python cannot evaluate faithfully are *skipped with a reason*
   and listed in the report: transition rules (`oldSelf`: a create has no stored object) and
   rules calling Kubernetes CEL extensions (`isURL`, `quantity`, `format.*`, string/list
   library functions) that cel-python lacks.

Use it as `assert_valid(obj)`: the CRD file is chosen from `apiVersion` and `kind`.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import celpy.evaluation
import jsonschema
import yaml

from tests.support.shared import shared_path

# Fields of ObjectMeta a client may set. The CRD schema types `metadata` as a bare object
# because the API server validates ObjectMeta itself, so the walk checks against this list.
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
    }
)


class SchemaError(AssertionError):
    """A rendered object that the API server would reject or silently prune."""


def crd_file(group: str, kind: str) -> Path:
    """The CRD file for `kind` in `group` (controller-gen naming: <group>_<plural>.yaml)."""
    name = kind.lower()
    plural = name[:-1] + "ies" if name.endswith("y") else name + "es" if name.endswith("s") else name + "s"
    return shared_path("schemas", "crds", f"{group}_{plural}.yaml")


# The RayService CRD is ~2 MB of YAML: the C loader and caching keep the suite fast.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _load_crd(path: Path) -> dict[str, Any]:
    with path.open() as handle:
        return yaml.load(handle, Loader=_Loader)  # CSafeLoader/SafeLoader: safe


def _int_or_string(node: Any) -> Any:
    """A copy of `node` where every x-kubernetes-int-or-string accepts both types.

    controller-gen writes these as `anyOf: [integer, string]`, but the extension alone is
    legal in a structural schema; without the rewrite a `type` next to it would reject the
    other form.
    """
    if isinstance(node, list):
        return [_int_or_string(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _int_or_string(value) for key, value in node.items()}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    return out


def served_schema(api_version: str, kind: str) -> dict[str, Any]:
    """The openAPIV3Schema the API server serves for `apiVersion`/`kind` (a fresh copy).

    Fails (rather than falling back to another version) when the version is not served, so
    that rendering a deprecated or unknown version is itself a test failure.
    """
    group, _, _ = api_version.partition("/")
    # Resolve the path outside the cache so a missing ../shared skips (or fails) every time.
    return copy.deepcopy(_served_schema(crd_file(group, kind), api_version, kind))


@functools.cache
def _served_schema(path: Path, api_version: str, kind: str) -> dict[str, Any]:
    _, _, version = api_version.partition("/")
    crd = _load_crd(path)
    if crd["spec"]["names"]["kind"] != kind:
        raise SchemaError(f"{path.name} defines {crd['spec']['names']['kind']}, not {kind}")
    for candidate in crd["spec"]["versions"]:
        if candidate["name"] == version:
            if not candidate.get("served", False):
                raise SchemaError(f"{api_version} {kind} is not served")
            return _int_or_string(candidate["schema"]["openAPIV3Schema"])
    raise SchemaError(f"{api_version} {kind}: no such version in the CRD")


def validate(obj: dict[str, Any], schema: dict[str, Any]) -> None:
    """Raise SchemaError listing every JSON-Schema violation of `obj`."""
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    validator = validator_cls(schema)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
        raise SchemaError("schema violations:\n  " + "\n  ".join(lines))


def unknown_fields(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Field paths in `obj` that the schema does not declare (the API server would prune)."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return []
    if isinstance(obj, list):
        items = schema.get("items")
        if not isinstance(items, dict):
            return [f"{path}[]"] if obj else []
        found: list[str] = []
        for index, item in enumerate(obj):
            found += unknown_fields(item, items, f"{path}[{index}]")
        return found
    if not isinstance(obj, dict):
        return []
    found = []
    properties = schema.get("properties", {})
    additional = schema.get("additionalProperties")
    for key, value in obj.items():
        child_path = f"{path}.{key}" if path else key
        if path == "" and key == "metadata":
            found += [f"metadata.{k}" for k in value if k not in OBJECT_META_FIELDS]
        elif key in properties:
            found += unknown_fields(value, properties[key], child_path)
        elif isinstance(additional, dict):
            found += unknown_fields(value, additional, child_path)
        elif additional is True or schema.get("x-kubernetes-preserve-unknown-fields"):
            continue
        else:
            found.append(child_path)
    return found


# Functions cel-python provides: its standard library plus the macros its parser expands.
_CEL_FUNCTIONS = frozenset(celpy.evaluation.base_functions) | {"has", "all", "exists", "exists_one", "map", "filter"}
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_OLD_SELF = re.compile(r"\boldSelf\b")


@dataclass(frozen=True)
class CelRule:
    """One `x-kubernetes-validations` rule at a field path of one object."""

    path: str
    rule: str
    message: str


@dataclass
class CelReport:
    """What `cel_check` did with each rule the object reached."""

    evaluated: list[CelRule] = field(default_factory=list)
    skipped: list[tuple[CelRule, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


@functools.cache
def _cel_environment() -> celpy.Environment:
    return celpy.Environment()


@functools.cache
def _cel_program(rule: str) -> celpy.Runner:
    env = _cel_environment()
    return env.program(env.compile(rule))


def _skip_reason(rule: str) -> str | None:
    """Why cel-python cannot stand in for the API server on `rule`, or None if it can."""
    code = _STRING_LITERAL.sub("''", rule)
    if _OLD_SELF.search(code):
        return "transition rule (oldSelf): a create has no stored object to compare with"
    missing = sorted({name for name in _CALL.findall(code) if name not in _CEL_FUNCTIONS})
    if missing:
        return f"Kubernetes CEL extension(s) cel-python lacks: {', '.join(missing)}"
    return None


def _defaulted(value: Any, schema: dict[str, Any]) -> Any:
    """A copy of `value` with the schema's defaults, all the way down, before any rule runs: the API
    server defaults the whole object, a defaulted field's own fields included, and validates after
    (kubernetes/kubernetes, staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting/
    algorithm.go, `Default`: sets a property's default, then recurses into every property). A rule on
    a parent may read a nested default, e.g. Kueue's `borrowWithinCohort.policy` on a ClusterQueue's
    `preemption` whose borrowWithinCohort is only the default `{}`."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        defaults = {key: copy.deepcopy(sub["default"]) for key, sub in properties.items() if "default" in sub}
        additional = schema.get("additionalProperties")
        result = {}
        for key, child in {**defaults, **value}.items():
            child_schema = properties.get(key, additional if isinstance(additional, dict) else None)
            result[key] = child if child_schema is None else _defaulted(child, child_schema)
        return result
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_defaulted(item, schema["items"]) for item in value]
    return value


def _evaluate(value: Any, schema: dict[str, Any], path: str, report: CelReport) -> None:
    for spec in schema.get("x-kubernetes-validations", ()):
        rule = CelRule(path or "<root>", spec["rule"], spec.get("message") or f"failed rule: {spec['rule']}")
        reason = _skip_reason(rule.rule)
        if reason is not None:
            report.skipped.append((rule, reason))
            continue
        try:
            program = _cel_program(rule.rule)
        except celpy.CELParseError as error:
            report.skipped.append((rule, f"cel-python cannot parse it: {error}"))
            continue
        report.evaluated.append(rule)
        try:
            result = program.evaluate({"self": celpy.json_to_cel(value)})
        except celpy.CELEvalError as error:
            # The API server rejects an object whose rule errors (e.g. a missing field).
            report.failures.append(f"{rule.path}: {rule.message} (evaluation error: {error.args[0]})")
            continue
        if isinstance(result, celpy.CELEvalError):
            report.failures.append(f"{rule.path}: {rule.message} (evaluation error: {result.args[0]})")
        elif not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            report.failures.append(f"{rule.path}: {rule.message}")


def _walk(value: Any, schema: dict[str, Any], path: str, report: CelReport) -> None:
    _evaluate(value, schema, path, report)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _walk(item, schema["items"], f"{path}[{index}]", report)
    elif isinstance(value, dict):
        properties = schema.get("properties", {})
        additional = schema.get("additionalProperties")
        for key, child in value.items():
            child_path = f"{path}.{key}" if path else key
            if key in properties:
                _walk(child, properties[key], child_path, report)
            elif isinstance(additional, dict):
                _walk(child, additional, child_path, report)


def cel_check(obj: dict[str, Any], schema: dict[str, Any]) -> CelReport:
    """Evaluate every CEL rule of `schema` that `obj` reaches; failures are in the report."""
    report = CelReport()
    _walk(_defaulted(obj, schema), schema, "", report)
    return report


def assert_valid(obj: dict[str, Any], crd_path: Path | None = None) -> CelReport:
    """All three checks against the CRD that serves `obj`'s apiVersion and kind (from
    ../shared/schemas/crds, or the CRD file `crd_path`).

    Returns the CEL report so a caller can see which rules ran and which were skipped.
    """
    group, _, _ = obj["apiVersion"].partition("/")
    # Read-only use, so the cached schema is safe to share without a copy.
    schema = _served_schema(crd_path or crd_file(group, obj["kind"]), obj["apiVersion"], obj["kind"])
    validate(obj, schema)
    pruned = unknown_fields(obj, schema)
    if pruned:
        raise SchemaError("fields the API server would prune:\n  " + "\n  ".join(pruned))
    report = cel_check(obj, schema)
    if report.failures:
        raise SchemaError("CEL rules (x-kubernetes-validations) violated:\n  " + "\n  ".join(report.failures))
    return report
