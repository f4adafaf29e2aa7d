"""BFCL's AST rules for single-turn calls (after `bfcl_eval/eval_checker/ast_eval/ast_checker.py`).

A call matches an expected call `{name: {argument: [allowed values...]}}` when:

- the function name is the expected one;
- every argument the function's doc marks `required` is present, and no argument is unknown (one
  the doc or the expected call does not list);
- each value has the declared type (an int is accepted where a float is expected; a value of the
  allowed values' own type is accepted too: BFCL's "variable" case) and is among the allowed
  values, compared with BFCL's normalisation: strings lowercased with spaces and `,./-_*^`
  removed (and `'` read as `"`), numbers by value, lists element by element, dicts key by key
  (a key whose allowed values include `""` may be left out);
- an argument whose allowed values include `""` may be omitted.

A task is right when the calls match the expected ones one to one, in any order (BFCL's
`parallel` checker matches greedily; the matching here is a full one, which differs only when a
greedy pick would block a valid assignment); `irrelevance` (no expected call) is right when no
call is made at all (a call that failed to parse counts as a call).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specguard_bench.tool_calling.bfcl_data import BfclTask

_PUNCT = re.compile(r"[ ,./\-_*^]")
_PY_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,),
                                          "float": (float, int), "boolean": (bool,),
                                          "array": (list,), "tuple": (list,), "dict": (dict,)}


@dataclass(frozen=True)
class Check:
    """The verdict on one task: `correct`, and `error` saying why not (None when correct)."""

    correct: bool
    error: str | None = None


def standardize(text: str) -> str:
    """BFCL's string normalisation: spaces and `,./-_*^` removed, lowercased, `'` -> `"`."""
    return _PUNCT.sub("", text).lower().replace("'", '"')


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _has_type(value: Any, declared: str) -> bool:
    kinds = _PY_TYPES.get(declared)
    if kinds is None:  # "any"
        return True
    if isinstance(value, bool) and bool not in kinds:
        return False
    return isinstance(value, kinds)


def equal(value: Any, allowed: Any, doc: Mapping[str, Any] | None = None) -> bool:
    """Whether `value` equals one `allowed` value, under BFCL's normalisation. `doc` is the
    parameter's BFCL doc (its `items`/`properties` guide nested values)."""
    doc = doc or {}
    if isinstance(allowed, str):
        return isinstance(value, str) and standardize(value) == standardize(allowed)
    if isinstance(allowed, bool):
        return isinstance(value, bool) and value == allowed
    if _is_number(allowed):
        if not _is_number(value) or (doc.get("type") == "integer" and isinstance(value, float)):
            return False
        return float(value) == float(allowed)
    if isinstance(allowed, list):
        items = doc.get("items") if isinstance(doc.get("items"), Mapping) else None
        return isinstance(value, list) and len(value) == len(allowed) and all(
            equal(v, a, items) for v, a in zip(value, allowed, strict=True))
    if isinstance(allowed, Mapping):
        return isinstance(value, Mapping) and dict_problem(value, allowed, doc) is None
    return bool(value == allowed and type(value) is type(allowed))


def among(value: Any, allowed: Sequence[Any], doc: Mapping[str, Any] | None = None) -> bool:
    """Whether `value` equals any of the `allowed` values (`""` marks "may be omitted" and
    matches only an empty string)."""
    return any(equal(value, a, doc) for a in allowed)


def dict_problem(value: Mapping[str, Any], allowed: Mapping[str, Any],
                 doc: Mapping[str, Any] | None = None) -> str | None:
    """Why a dict value does not match one allowed dict `{key: [allowed values]}`, or None."""
    props = (doc or {}).get("properties") or {}
    for key, item in value.items():
        if key not in allowed:
            return f"unexpected key {key!r}"
        options = allowed[key] if isinstance(allowed[key], list) else [allowed[key]]
        if not among(item, options, props.get(key)):
            return f"key {key!r}: {item!r} is not among {options!r}"
    for key, options in allowed.items():
        if key not in value and not (isinstance(options, list) and "" in options):
            return f"missing key {key!r}"
    return None


def call_problem(doc: Mapping[str, Any], name: str, args: Mapping[str, Any],
                 expected: Mapping[str, Mapping[str, list[Any]]]) -> str | None:
    """Why one call (`name`, `args`) does not match one expected call, or None. `doc` is the
    BFCL function doc of the expected function."""
    (want, allowed), = expected.items()
    if name != want:
        return f"called {name!r}, expected {want!r}"
    params = doc.get("parameters", {})
    props: Mapping[str, Any] = params.get("properties", {})
    for param in params.get("required", []):
        if param not in args:
            return f"{name}: missing required argument {param!r}"
    for param, value in args.items():
        if param not in props or param not in allowed:
            return f"{name}: unexpected argument {param!r}"
        declared = str(props[param].get("type", "any"))
        options = allowed[param]
        variable = any(type(a) is type(value) for a in options if a != "")
        if not _has_type(value, declared) and not variable:
            return f"{name}: argument {param!r} should be {declared}, got {value!r}"
        if not among(value, options, props[param]):
            return f"{name}: argument {param!r} is {value!r}, expected one of {options!r}"
    for param, options in allowed.items():
        if param not in args and "" not in options:
            return f"{name}: argument {param!r} is missing (and may not be omitted)"
    return None


def _match(ok: list[list[bool]]) -> bool:
    """Whether the expected calls (rows) can each be matched to a distinct call (columns)."""
    owner: dict[int, int] = {}

    def assign(row: int, seen: set[int]) -> bool:
        for col, fits in enumerate(ok[row]):
            if fits and col not in seen:
                seen.add(col)
                if col not in owner or assign(owner[col], seen):
                    owner[col] = row
                    return True
        return False

    return all(assign(row, set()) for row in range(len(ok)))


def check_task(task: BfclTask, calls: Sequence[tuple[str, Mapping[str, Any]]],
               invalid: Sequence[str] = ()) -> Check:
    """Score one task: `calls` are the valid calls (name, arguments) in the order written,
    `invalid` the errors of calls that failed to parse or validate."""
    if task.ground_truth is None:
        made = len(calls) + len(invalid)
        return Check(True) if made == 0 else Check(False, f"{made} call(s) made; none was right")
    if invalid:
        return Check(False, f"invalid call: {invalid[0]}")
    expected = task.ground_truth
    if len(calls) != len(expected):
        return Check(False, f"{len(calls)} call(s) made, {len(expected)} expected")
    docs = {f["name"]: f for f in task.functions}
    problems = [[call_problem(docs[next(iter(want))], name, args, want) for name, args in calls]
                for want in expected]
    if _match([[p is None for p in row] for row in problems]):
        return Check(True)
    unmatched = next((row for row in problems if None not in row), None)
    if unmatched is None:
        return Check(False, "the calls cannot be matched one to one to the expected calls")
    return Check(False, next(p for p in unmatched if p is not None))
