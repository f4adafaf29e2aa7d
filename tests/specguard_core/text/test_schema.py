"""Untrusted JSON and offline JSON schemas: pure functions, checked on hand-made values."""

from __future__ import annotations

import math
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
    assert validator({"$schema": 5}).__class__ is jsonschema.Draft202012Validator
