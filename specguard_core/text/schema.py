"""JSON from untrusted sources (model-written tool calls) and JSON schemas checked offline.

Pure functions, no I/O: `loads_untrusted` refuses NaN/Infinity, `json_problem` walks a value
iteratively (any depth is safe to check), `validator` resolves `$ref`s inside the schema only (a
remote reference is an error, never a download) and matches `pattern` / `patternProperties` in
bounded time (`text/patterns.py`), `unresolvable_ref` finds a `$ref` that does not resolve.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from functools import cache
from typing import Any

import jsonschema
import regex
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012, specification_with

from specguard_core.text import patterns
from specguard_core.text.errors import FREE_TEXT_LIMIT, quoted

MAX_JSON_DEPTH = 64  # deeper tool-call arguments are refused: nothing real nests that deep, and
# recursive consumers (deepcopy, jsonschema, templates) would hit Python's recursion limit


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_untrusted(text: str) -> Any:
    """Strict JSON for model output: NaN/Infinity refused (they would be written out as non-JSON)."""
    return json.loads(text, strict=False, parse_constant=_no_constants)


def json_problem(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why `value` is not plain JSON data (a non-finite float, a string or key that does not
    encode to UTF-8, nesting deeper than `limit`), or None. Walked iteratively, so any depth is
    safe to check."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"{item} is not a JSON number"
        if isinstance(item, str) and not _encodes(item):
            return "a string holds an unpaired surrogate (an escape such as \\ud800), not Unicode"
        if isinstance(item, (dict, list)):
            if depth > limit:
                return f"nested deeper than {limit} levels"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _no_retrieval(uri: str) -> Resource:
    raise LookupError(f"SpecGuard never fetches schemas ({uri})")


# immutable; resolves references inside the schema only (mypy does not see attrs' alias `retrieve`)
_OFFLINE = Registry(retrieve=_no_retrieval)  # type: ignore[call-arg]


def validator(schema: Any) -> Any:
    """A JSON-schema validator for `schema` (its `$schema` dialect, else 2020-12) that resolves
    references inside the schema only (a remote `$ref` is an error, never a download) and matches
    patterns with a time bound (a match past it fails). A schema that `patterns.pattern_problem`
    refuses must not get here."""
    dialect = schema.get("$schema") if isinstance(schema, dict) else None
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator) \
        if isinstance(dialect, str) else jsonschema.Draft202012Validator  # a bad one fails check
    return _bounded(cls)(schema, registry=_OFFLINE)


def check_schema(schema: Any) -> None:
    """Raise `jsonschema.SchemaError` unless `schema` is a valid schema of its dialect, its
    patterns read as the `regex` package that matches them reads them (not as Python's `re`: a
    JSON schema may use `\\p{L}`)."""
    validator(schema).check_schema(schema, format_checker=_FORMATS)


def _compiles(value: Any) -> bool:
    if isinstance(value, str):
        regex.compile(value)  # raises regex.error: the format check fails
    return True


_FORMATS = jsonschema.FormatChecker()  # the usual formats, "regex" as the `regex` package reads it
_FORMATS.checks("regex", raises=(regex.error, OverflowError, RecursionError))(_compiles)


@cache
def _bounded(cls: Any) -> Any:
    """`cls` with its three regex-matching keywords matched by `patterns.search`."""
    return jsonschema.validators.extend(cls, validators={
        "pattern": _pattern, "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties})


def _matches(pattern: str, text: str) -> bool | str:
    """True / False, or why it could not be decided (the time bound)."""
    try:
        return patterns.search(pattern, text)
    except patterns.PatternTimeout as err:
        return str(err)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string"):
        found = _matches(pattern, instance)
        if found is not True:
            yield jsonschema.ValidationError(found or f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, pattern_props: dict[str, Any], instance: Any,
                        schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_props.items():
        for key, value in instance.items():
            found = _matches(pattern, key)
            if isinstance(found, str):
                yield jsonschema.ValidationError(found)
            elif found:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any
                           ) -> Iterator[Any]:
    """jsonschema's `additionalProperties`, with `patternProperties` matched in bounded time (a
    key whose match times out counts as additional)."""
    if not validator.is_type(instance, "object"):
        return
    named, matching = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in named
              and not any(_matches(p, k) is True for p in matching)]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        yield jsonschema.ValidationError(
            f"Additional properties are not allowed ({', '.join(map(repr, sorted(extras)))} "
            f"{'was' if len(extras) == 1 else 'were'} unexpected)")


def unresolvable_ref(schema: Any) -> str | None:
    """The first `$ref` of `schema` that does not resolve inside it (remote or dangling)."""
    dialect = schema.get("$schema") if isinstance(schema, dict) else None
    spec = specification_with(dialect, default=DRAFT202012) if isinstance(dialect, str) \
        else DRAFT202012
    root = spec.create_resource(schema)
    stack = [(root, _OFFLINE.resolver_with_root(root))]
    while stack:
        resource, resolver = stack.pop()
        ref = resource.contents.get("$ref") if isinstance(resource.contents, dict) else None
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except Unresolvable:
                return ref
        stack.extend((sub, resolver.in_subresource(sub)) for sub in resource.subresources())
    return None


def schema_problem(schema: Any, where: str) -> str | None:
    """Why `schema` (`where`'s) cannot be used, or None: not a valid JSON schema (2020-12 unless
    it names a `$schema`), nested too deeply, a `$ref` that does not resolve inside it (schemas
    are never fetched), or a pattern that cannot be matched in bounded time."""
    try:
        check_schema(schema)
        ref = unresolvable_ref(schema)
    except jsonschema.SchemaError as err:
        return (f"{where} has an invalid JSON schema: {quoted(err.message, FREE_TEXT_LIMIT)}; "
                "fix it (JSON Schema 2020-12 unless it names a $schema)")
    except RecursionError:
        return f"{where} has a JSON schema nested too deeply"
    if ref is not None:
        return (f"{where} has a schema $ref {quoted(ref)} that does not resolve inside the "
                "schema; SpecGuard never fetches schemas: inline the definition under $defs")
    if (problem := patterns.pattern_problem(schema)) is not None:
        return f"{where} has an unusable schema: {problem}"
    return None
