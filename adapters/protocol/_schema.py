"""The JSON Schema subset OpenAI's strict mode accepts, checked before anything is generated.

A strict `text.format` schema or a strict function's `parameters` must stay inside the subset
the structured-output docs describe (what the server can enforce exactly): the root is an
object; every object lists all its properties in `required` and sets `additionalProperties:
false`; the keywords are those below. Anything else is refused with the path of the first
offending keyword, so the client's 400 names it (`text.format.schema.properties.age.not`),
instead of a grammar that silently enforces less.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["strict_schema_problems"]

_COMMON = frozenset({"type", "description", "title", "enum", "const", "anyOf", "$ref", "default"})
#: Annotations a schema generator writes (zod, pydantic) that constrain nothing.
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "examples", "readOnly", "writeOnly", "deprecated"}
)
_BY_TYPE: dict[str, frozenset[str]] = {
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "array": frozenset({"items", "minItems", "maxItems"}),
    "string": frozenset({"pattern", "format", "minLength", "maxLength"}),
    "number": frozenset(
        {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
    ),
    "integer": frozenset(
        {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
    ),
    "boolean": frozenset(),
    "null": frozenset(),
}
_DEFS = ("$defs", "definitions")
_TYPES = frozenset(_BY_TYPE)


def strict_schema_problems(schema: Any) -> Iterator[tuple[str, str]]:
    """`(path, message)` for each place `schema` leaves the strict subset (first one first);
    the path is relative to the schema (`properties.age`), `""` for the root."""
    if not isinstance(schema, Mapping):
        yield "", "a strict schema must be a JSON object"
        return
    if schema.get("type") != "object":
        yield "type", 'the root of a strict schema must have "type": "object"'
        return
    for key in _DEFS:
        defs = schema.get(key)
        if defs is None:
            continue
        if not isinstance(defs, Mapping):
            yield key, f"{key} must be an object of schemas"
            continue
        for name, sub in defs.items():
            yield from _node(sub, f"{key}.{name}")
    yield from _node(schema, "", root=True)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _node(schema: Any, path: str, *, root: bool = False) -> Iterator[tuple[str, str]]:
    if not isinstance(schema, Mapping):
        yield path, "each subschema must be a JSON object"
        return
    types = schema.get("type")
    named = [types] if isinstance(types, str) else list(types or [])
    if any(not isinstance(t, str) or t not in _TYPES for t in named):
        yield _join(path, "type"), f"type must be one of {', '.join(sorted(_TYPES))}"
        return
    allowed = set(_COMMON | _ANNOTATIONS).union(*(_BY_TYPE[t] for t in named))
    if root:
        allowed.update(_DEFS)
    for key in schema:
        if key not in allowed:
            yield (
                _join(path, key),
                f"{key!r} is not supported in strict mode"
                + (f" for type {'/'.join(named)}" if named else ""),
            )
            return
    if not named and not any(k in schema for k in ("enum", "const", "anyOf", "$ref")):
        yield path or "type", "each subschema needs a type (or enum, const, anyOf, $ref)"
        return
    ref = schema.get("$ref")
    if ref is not None and not (
        isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/", "#"))
    ):
        yield _join(path, "$ref"), "only local references (#/$defs/NAME) are supported"
        return
    for i, sub in enumerate(schema.get("anyOf") or ()):
        yield from _node(sub, _join(path, f"anyOf[{i}]"))
    if "object" in named:
        yield from _object(schema, path)
    if "array" in named and "items" in schema:
        yield from _node(schema["items"], _join(path, "items"))


def _object(schema: Mapping[str, Any], path: str) -> Iterator[tuple[str, str]]:
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        yield _join(path, "properties"), "properties must be an object"
        return
    if schema.get("additionalProperties") is not False:
        yield (
            _join(path, "additionalProperties"),
            "strict mode needs additionalProperties: false on every object",
        )
        return
    required = schema.get("required", [])
    missing = [name for name in properties if name not in required]
    if missing:
        yield (
            _join(path, "required"),
            f"strict mode needs every property required; missing {', '.join(missing)}",
        )
        return
    for name, sub in properties.items():
        yield from _node(sub, _join(path, f"properties.{name}"))
