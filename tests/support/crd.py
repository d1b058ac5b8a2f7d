"""Validate rendered objects against the real CRD schemas in ../shared/schemas/crds.

Two checks, because a real API server does two things with a custom object:

1. `validate` — JSON-Schema validation of the served version's `openAPIV3Schema`: types,
   required fields, enums, patterns, int-or-string quantities. A failure here is what the
   API server would answer with 422.
2. `unknown_fields` — every field path in the object must exist in the schema. The API
   server *prunes* unknown fields silently (structural schemas), so a misspelt field is
   accepted and then simply missing: no error, just a manifest that does less than it says.

CEL rules (`x-kubernetes-validations`) are not evaluated here; tests that matter for them
assert the rule's intent directly.

Use it as `assert_valid(obj)`: the CRD file is chosen from `apiVersion` and `kind`.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

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
    return shared_path("schemas", "crds", f"{group}_{kind.lower()}s.yaml")


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


def assert_valid(obj: dict[str, Any]) -> None:
    """Both checks against the CRD that serves `obj`'s apiVersion and kind."""
    group, _, _ = obj["apiVersion"].partition("/")
    # Read-only use, so the cached schema is safe to share without a copy.
    schema = _served_schema(crd_file(group, obj["kind"]), obj["apiVersion"], obj["kind"])
    validate(obj, schema)
    pruned = unknown_fields(obj, schema)
    if pruned:
        raise SchemaError("fields the API server would prune:\n  " + "\n  ".join(pruned))
