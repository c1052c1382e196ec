"""What a client tool's parameter schema (and a response format's schema) must be before any model is handed it.

OpenAI and Anthropic refuse a tool whose schema is not a JSON Schema of ``"type": "object"``, is no
valid JSON Schema, or holds a ``$ref`` that does not resolve; a model server cannot use one whose
references only lead back to themselves. Refused by Duet before the reasoner runs, such a schema costs
no model call (an upstream refusing it would, after the reasoning was paid for).

The schema is compiled by ``jsonschema-rs`` (its meta-schema, its references and its ``pattern``
regexes: ~50 µs for a common tool, where the ``jsonschema`` package takes milliseconds); the loops of
references are looked for here. Each distinct schema is checked once: clients send the same tools
with every request.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping
from urllib.parse import unquote

import jsonschema_rs

from duet.workbenches._tool_schemas import ContentCache, content_key

MAX_CHECKED_SCHEMAS = 1024
_checked: ContentCache[str] = ContentCache(MAX_CHECKED_SCHEMAS, 8 * 1024 * 1024)

# Keywords whose value is one schema, a list of schemas, or a map of names to schemas (every draft's).
_ONE = ("additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if", "then", "else",
        "unevaluatedItems", "unevaluatedProperties", "contentSchema", "items")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
# Those that apply to the same value as the schema holding them: a loop through them never ends.
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")
_REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")


def parameters_problem(schema: Any) -> str | None:
    """What is wrong with ``schema`` as a tool's parameters (``None``: nothing), in one line that
    names the place inside the schema (``properties.city.type: ...``)."""
    if not isinstance(schema, Mapping):
        return "must be a JSON Schema object"
    if schema.get("type") != "object":
        got = f"type {str(schema['type'])[:40]!r}" if "type" in schema else "no type"
        return f"must be a JSON Schema of type 'object' (the arguments are one object), got {got}"
    return json_schema_problem(schema)


def json_schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What is wrong with ``schema`` as a JSON Schema (``None``: nothing): it must be valid for its
    draft (``$schema``, else 2020-12), its references must resolve within it, and lead to no loop."""
    key = content_key(schema)
    if key is None:
        return _problem(dict(schema), True) or None  # jsonschema-rs reads dicts only (a mappingproxy raised ValueError)
    # A schema without any reference (most) has no loop to look for: its JSON text says so at once.
    references = b"$ref" in key or b'Ref"' in key
    return _checked.get_or_make(schema, lambda copy: _problem(copy, references), key) or None


def _problem(schema: dict[str, Any], references: bool) -> str:
    dialect = jsonschema_rs.validator_cls_for(schema)  # $schema's draft, else 2020-12
    if "$schema" in schema:  # an unknown $schema is ignored (the latest draft applies), as upstreams' validators do
        schema = {key: value for key, value in schema.items() if key != "$schema"}
    try:
        dialect(schema, offline=True)  # offline: a remote $ref is never fetched (it does not resolve)
    except jsonschema_rs.ValidationError as exc:
        if isinstance(exc.kind, jsonschema_rs.ValidationErrorKind.Referencing):
            return f"a $ref does not resolve within the schema: {exc.message}"
        where = _place(exc.instance_path)
        return f"{where}: {exc.message}" if where else f"not a valid JSON Schema: {exc.message}"
    return (_reference_loop(schema) if references else None) or ""


def _place(path: Any) -> str:
    return ".".join(str(part) for part in path)[:200]


def _subschemas(schema: Mapping[str, Any], in_place: bool) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """The schemas inside ``schema``, each with its place in it (only those that apply to the same
    value as ``schema``, with ``in_place``)."""
    for keyword in _IN_PLACE_ONE if in_place else _ONE:
        if isinstance(schema.get(keyword), (Mapping, bool)):
            yield schema[keyword], (keyword,)
    for keyword in _IN_PLACE_LIST if in_place else _LIST:
        if isinstance(schema.get(keyword), list):
            yield from ((item, (keyword, index)) for index, item in enumerate(schema[keyword]))
    if in_place:
        return
    for keyword in _MAP:
        if isinstance(schema.get(keyword), Mapping):
            yield from ((item, (keyword, name)) for name, item in schema[keyword].items() if isinstance(item, (Mapping, bool)))


def _all_schemas(root: Mapping[str, Any]) -> dict[int, tuple[Mapping[str, Any], tuple[Any, ...]]]:
    """Every schema object in ``root`` (by ``id``), with its place."""
    found: dict[int, tuple[Mapping[str, Any], tuple[Any, ...]]] = {}
    stack: list[tuple[Any, tuple[Any, ...]]] = [(root, ())]
    while stack:
        schema, path = stack.pop()
        if isinstance(schema, Mapping) and id(schema) not in found:
            found[id(schema)] = (schema, path)
            stack.extend((item, (*path, *place)) for item, place in _subschemas(schema, in_place=False))
    return found


def _target(root: Mapping[str, Any], reference: str, anchors: Mapping[str, Any]) -> Any:
    """The schema a reference within the document names (``None`` for one that names another document:
    the compiler found it, and a loop through it is not looked for)."""
    if not reference.startswith("#"):
        return None
    fragment = unquote(reference[1:])
    if not fragment.startswith("/"):
        return anchors.get(fragment) if fragment else root
    value: Any = root
    for token in fragment[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, Mapping):
            value = value.get(token)
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return None
    return value


def _reference_loop(root: Mapping[str, Any]) -> str | None:
    """Where a ``$ref`` leads back to itself without going into a property or an item: a validator
    following it would never return (``{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}``).
    A recursive schema (a tree whose ``children`` items are ``{"$ref": "#"}``) is no loop."""
    schemas = _all_schemas(root)
    anchors = {schema[keyword]: schema for schema, _ in schemas.values() for keyword in ("$anchor", "$dynamicAnchor")
               if isinstance(schema.get(keyword), str)}

    def edges(schema: Mapping[str, Any]) -> Iterator[tuple[Any, tuple[Any, ...]]]:
        for keyword in _REFERENCES:
            if isinstance(schema.get(keyword), str):
                yield _target(root, schema[keyword], anchors), (keyword,)
        yield from _subschemas(schema, in_place=True)

    visiting, done = 1, 2
    state: dict[int, int] = {}
    for start, _ in schemas.values():  # depth first over the in-place edges, from every schema
        if id(start) in state:
            continue
        state[id(start)] = visiting
        stack = [(start, edges(start))]
        while stack:
            node, remaining = stack[-1]
            child, place = next(remaining, (None, None))
            if place is None:
                state[id(node)] = done
                stack.pop()
            elif isinstance(child, Mapping):
                seen = state.get(id(child))
                if seen == visiting:
                    where = _place((*schemas.get(id(node), (None, ()))[1], *place))
                    return f"{where}: the reference leads back to itself (a loop no validator can follow)"
                if seen is None:
                    state[id(child)] = visiting
                    stack.append((child, edges(child)))
    return None
