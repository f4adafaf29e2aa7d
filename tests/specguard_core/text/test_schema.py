"""Untrusted JSON and offline JSON schemas: pure functions, checked on hand-made values."""

from __future__ import annotations

import math
import time
from typing import Any

import jsonschema
import pytest
from referencing.exceptions import Unresolvable

from specguard_core.text.chat import InputError, check_tools
from specguard_core.text.schema import (
    MAX_JSON_DEPTH,
    json_problem,
    loads_untrusted,
    unresolvable_ref,
    validator,
)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_json_problem() -> None:
    assert json_problem({"a": [1, 2.5, "x", None, True, {"b": {}}]}) is None
    assert json_problem({"a": _nested(MAX_JSON_DEPTH - 1)}) is None
    assert json_problem({"a": _nested(MAX_JSON_DEPTH)}) == f"nested deeper than {MAX_JSON_DEPTH} levels"
    assert json_problem(_nested(100_000)) is not None  # iterative: no RecursionError
    for bad in (math.nan, math.inf, -math.inf):
        assert "is not a JSON number" in (json_problem({"a": [bad]}) or "")


@pytest.mark.parametrize("text", ["NaN", '{"a": Infinity}', "[-Infinity]"])
def test_loads_untrusted_refuses_non_json_constants(text: str) -> None:
    with pytest.raises(ValueError, match="is not JSON"):
        loads_untrusted(text)
    assert loads_untrusted('{"a": "line\nbreak"}') == {"a": "line\nbreak"}  # control chars ok


@pytest.mark.parametrize(("schema", "bad_ref"), [
    ({"properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"type": "string"}}}, None),
    ({"properties": {"a": {"$ref": "#/$defs/b"}}, "$defs": {"a": {}}}, "#/$defs/b"),
    ({"items": {"$ref": "http://json-schema.org/draft-07/schema#"}},
     "http://json-schema.org/draft-07/schema#"),
    ({"$schema": "http://json-schema.org/draft-07/schema#",
      "definitions": {"a": {"type": "string"}}, "properties": {"x": {"$ref": "#/definitions/a"}}},
     None),
    ({"$id": "urn:x", "$defs": {"a": {"$id": "urn:y", "$anchor": "here"}},
      "properties": {"x": {"$ref": "urn:y#here"}, "y": {"$ref": "urn:z"}}}, "urn:z"),
    (True, None),
])
def test_unresolvable_ref(schema: Any, bad_ref: str | None) -> None:
    assert unresolvable_ref(schema) == bad_ref


def test_validator_never_fetches(monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib.request

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a schema must never be fetched")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    v = validator({"properties": {"a": {"$ref": "https://example.com/never.json"}}})
    with pytest.raises(Unresolvable, match="never.json"):
        v.validate({"a": 1})


def test_bad_dialect_is_a_schema_error() -> None:
    with pytest.raises(InputError, match="invalid JSON schema"):
        check_tools([{"type": "function", "function": {"name": "f",
                                                       "parameters": {"$schema": []}}}])
    assert validator({"$schema": 5}).META_SCHEMA == jsonschema.Draft202012Validator.META_SCHEMA


CATASTROPHIC = "^(\\w+\\s?)*$"  # exponential backtracking on a long word that does not match


LONG_WORD = "a" * 20000 + "!"


@pytest.mark.parametrize(("schema", "value"), [
    ({"type": "string", "pattern": CATASTROPHIC}, LONG_WORD),
    ({"type": "object", "patternProperties": {CATASTROPHIC: {"type": "string"}}}, {LONG_WORD: 1}),
    ({"type": "object", "patternProperties": {CATASTROPHIC: {}}, "additionalProperties": False},
     {LONG_WORD: 1}),
    ({"type": "object", "propertyNames": {"pattern": CATASTROPHIC}}, {LONG_WORD: 1}),
])
def test_patterns_are_matched_in_bounded_time(schema: dict[str, Any], value: Any) -> None:
    """Python's re takes exponential time on these; the bounded match gives up and refuses."""
    t0 = time.perf_counter()
    with pytest.raises(jsonschema.ValidationError, match="took over|not allowed"):
        validator(schema).validate(value)
    assert time.perf_counter() - t0 < 5


def test_patterns_still_validate() -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"}},
              "patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": False}
    validator(schema).validate({"code": "AB", "x_a": 1})
    for bad in ({"code": "ab"}, {"x_a": "1"}, {"y": 1}):
        with pytest.raises(jsonschema.ValidationError):
            validator(schema).validate(bad)


@pytest.mark.parametrize(("params", "why"), [
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(a"}}},
     "is not a .*regex"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "\\p{Foo}"}}},
     "is not a .*regex"),
    ({"type": "object", "patternProperties": {"^x": {}}, "unevaluatedProperties": False},
     "additionalProperties instead"),
])
def test_tools_with_unusable_patterns_are_refused(params: dict[str, Any], why: str) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": params}}
    with pytest.raises(InputError, match=why):
        check_tools([tool])


def test_patterns_are_read_as_the_bounded_matcher_reads_them() -> None:
    """`\\p{L}` (a JSON-schema and `regex` property class; not Python's re) is taken."""
    params = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^\\p{L}+$"}}}
    check_tools([{"type": "function", "function": {"name": "f", "parameters": params}}])
    validator(params).validate({"a": "été"})
    with pytest.raises(jsonschema.ValidationError):
        validator(params).validate({"a": "1"})
