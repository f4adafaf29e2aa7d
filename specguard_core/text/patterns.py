"""Regular expressions from JSON schemas (`pattern`, `patternProperties`), matched in bounded time.

A caller's schema (a tool's parameters, a response format) may hold a pattern, and model output
(untrusted) is matched against it. Python's `re` has no time bound (`^(\\w+\\s?)*$` against a long
word takes exponential time), so patterns are matched with the `regex` package and its `timeout=`:
a match that takes longer than `MATCH_TIMEOUT_S` is a `PatternTimeout`, which the schema check
reports as a failed match (the value is refused, never waited for). Where a grammar constrains
decoding, llguidance enforces the same patterns itself, in linear time.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import regex

from specguard_core.text.errors import FREE_TEXT_LIMIT, quoted

MATCH_TIMEOUT_S = 0.1  # one search of one pattern in one value
# JSON-schema keywords whose values are maps from names (not keywords) to schemas or name lists
_NAME_MAPS = {"properties", "$defs", "definitions", "dependentSchemas", "dependentRequired",
              "dependencies"}


class PatternTimeout(ValueError):
    """A pattern took longer than `MATCH_TIMEOUT_S` to match a value."""


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    return regex.compile(pattern)


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (JSON Schema's unanchored `pattern`); raises
    `PatternTimeout` past the time bound and `regex.error` for a pattern that does not compile
    (`pattern_problem` finds those up front)."""
    try:
        return _compiled(pattern).search(text, timeout=MATCH_TIMEOUT_S) is not None
    except TimeoutError:
        raise PatternTimeout(f"the pattern {quoted(pattern)} took over {MATCH_TIMEOUT_S} s "
                             "to match; the value is refused") from None


def _schemas(schema: Any) -> Iterator[dict[str, Any]]:
    """Every object inside the JSON schema `schema`, walked iteratively (any depth is safe); the
    names of `properties`-like maps are names, not keywords, so only their values are walked."""
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            for key, value in item.items():
                stack.extend(value.values() if key in _NAME_MAPS and isinstance(value, dict)
                             else [value])
        elif isinstance(item, list):
            stack.extend(item)


def schema_patterns(schema: Any) -> Iterator[str]:
    """Every regular expression in the JSON schema `schema`: `pattern` values and
    `patternProperties` keys."""
    for item in _schemas(schema):
        if isinstance(item.get("pattern"), str):
            yield item["pattern"]
        if isinstance(props := item.get("patternProperties"), dict):
            yield from (k for k in props if isinstance(k, str))


def pattern_problem(schema: Any) -> str | None:
    """Why a pattern of `schema` cannot be used (it does not compile, or `patternProperties`
    meets `unevaluatedProperties`, which jsonschema would match with `re`), or None."""
    for pattern in schema_patterns(schema):
        try:
            _compiled(pattern)
        except (regex.error, OverflowError, RecursionError) as err:
            return (f"the pattern {quoted(pattern)} is not a valid regular expression: "
                    f"{quoted(str(err), FREE_TEXT_LIMIT)}")
    keywords = {key for item in _schemas(schema) for key in item}
    if {"patternProperties", "unevaluatedProperties"} <= keywords:
        return ("patternProperties with unevaluatedProperties cannot be checked in bounded "
                "time; use additionalProperties instead of unevaluatedProperties")
    return None
