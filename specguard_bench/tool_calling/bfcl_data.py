"""BFCL single-turn tasks: loading, checking, and BFCL's function docs as JSON-Schema tools.

The shipped categories live in `specguard_bench/data/bfcl/` (see its README for source and
licence); `load_file` reads any file in the same format. A line that cannot be used (not JSON, a
missing field, an unknown type, a schema JSON Schema cannot express, a malformed ground truth)
becomes a `Skipped` entry naming the line and the field, and the other lines still load.

Function names keep their dots (`math.factorial`): the engine's tool-name check accepts any
non-empty name, so no renaming is needed either way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from specguard_bench.common.files import BenchFileError, read_text
from specguard_bench.common.store import digest
from specguard_core.text.chat import InputError, check_tools
from specguard_core.text.schema import validator

CATEGORIES: tuple[str, ...] = ("simple_python", "multiple", "parallel", "parallel_multiple",
                               "irrelevance")
# BFCL's parameter types -> JSON Schema types (None: no type constraint)
TYPES: dict[str, str | None] = {"dict": "object", "float": "number", "tuple": "array",
                                "any": None, "integer": "integer", "string": "string",
                                "boolean": "boolean", "array": "array"}
# BFCL keys that are not JSON Schema (dropped from the offered schema)
NOT_SCHEMA = ("optional",)


class BfclFormatError(ValueError):
    """One part of a task is not in BFCL's format; `field` is its path in the line's JSON."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class BfclTask:
    """One BFCL task. `uid` (`<source>/<id>`) is stable across runs; `messages` the chat of its
    one turn; `functions` BFCL's docs (what the checker reads), `tools` the same offered as
    OpenAI-style function tools; `ground_truth` None for irrelevance (no call is right)."""

    uid: str
    category: str
    index: int
    task_id: str
    messages: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    ground_truth: list[dict[str, dict[str, list[Any]]]] | None

    @property
    def digest(self) -> str:
        """A hash of what the task asks (its chat and functions) and what counts as right."""
        return digest(self.messages, self.functions, self.ground_truth)


@dataclass(frozen=True)
class Skipped:
    """A line that could not be used: where (`source`, 1-based `line`), which `field`, why."""

    source: str
    line: int
    task_id: str | None
    field: str
    error: str

    def __str__(self) -> str:
        who = f" ({self.task_id})" if self.task_id else ""
        return f"{self.source}:{self.line}{who}: {self.field}: {self.error}"


def category_of(task_id: str) -> str:
    """`simple_python_12` -> `simple_python`: BFCL's id without its trailing `_<n>`."""
    head, _, tail = task_id.rpartition("_")
    return head if head and tail.isdigit() else task_id


def to_json_schema(spec: Any, field: str) -> dict[str, Any]:
    """One BFCL parameter doc as JSON Schema: `dict` -> `object`, `float` -> `number`, `tuple`
    -> `array`, `any` -> no type constraint, the others as they are; `properties`, `items` and
    `additionalProperties` mapped recursively; BFCL-only keys (`optional`) dropped."""
    if not isinstance(spec, Mapping):
        raise BfclFormatError(field, f"a parameter doc must be a JSON object, got {spec!r:.60}")
    if "type" not in spec:
        raise BfclFormatError(f"{field}.type", "missing")
    kind = spec["type"]
    if not isinstance(kind, str) or kind not in TYPES:
        raise BfclFormatError(f"{field}.type", f"unknown type {kind!r}; BFCL types are "
                              f"{', '.join(TYPES)}")
    out: dict[str, Any] = {k: v for k, v in spec.items()
                           if k not in ("type", "properties", "items", *NOT_SCHEMA)}
    if TYPES[kind] is not None:
        out["type"] = TYPES[kind]
    if "properties" in spec:
        props = spec["properties"]
        if not isinstance(props, Mapping):
            raise BfclFormatError(f"{field}.properties", "must be a JSON object of parameters")
        out["properties"] = {name: to_json_schema(sub, f"{field}.properties.{name}")
                             for name, sub in props.items()}
    if "items" in spec:
        out["items"] = to_json_schema(spec["items"], f"{field}.items")
    if isinstance(spec.get("additionalProperties"), Mapping):
        out["additionalProperties"] = to_json_schema(spec["additionalProperties"],
                                                     f"{field}.additionalProperties")
    return out


def to_tool(function: Any, field: str) -> dict[str, Any]:
    """One BFCL function doc as an OpenAI-style tool, its schema checked by jsonschema."""
    if not isinstance(function, Mapping):
        raise BfclFormatError(field, "a function doc must be a JSON object")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise BfclFormatError(f"{field}.name", "missing or not a non-empty string")
    if "parameters" not in function:
        raise BfclFormatError(f"{field}.parameters", "missing")
    params = to_json_schema(function["parameters"], f"{field}.parameters")
    fn = {"name": name, "description": str(function.get("description", "")),
          "parameters": params}
    try:  # what the engine checks when the tool is offered (names with dots are accepted)
        return check_tools([{"type": "function", "function": fn}])[0]
    except InputError as err:
        try:  # the schema's own error, with its place in the parameters
            validator(params).check_schema(params)
        except jsonschema.SchemaError as bad:
            where = "".join(f".{p}" for p in bad.path)
            raise BfclFormatError(f"{field}.parameters{where}",
                                  f"JSON Schema cannot express this: {bad.message}") from None
        raise BfclFormatError(field, f"the engine refuses this tool: {err}") from None


def _messages(question: Any) -> list[dict[str, Any]]:
    if not isinstance(question, list) or not question:
        raise BfclFormatError("question", "must be a non-empty list of turns")
    if len(question) != 1:
        raise BfclFormatError("question", f"has {len(question)} turns; only single-turn tasks "
                              "are supported")
    turn = question[0]
    if not isinstance(turn, list) or not turn:
        raise BfclFormatError("question[0]", "must be a non-empty list of chat messages")
    for i, m in enumerate(turn):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) \
                or not isinstance(m.get("content"), str):
            raise BfclFormatError(f"question[0][{i}]", "a message needs string `role` and "
                                  "`content`")
    return [{"role": m["role"], "content": m["content"]} for m in turn]


def _ground_truth(value: Any, functions: Sequence[Mapping[str, Any]]) -> list[Any]:
    names = {f["name"] for f in functions}
    if not isinstance(value, list) or not value:
        raise BfclFormatError("ground_truth", "must be a non-empty list of expected calls, or "
                              "null when no call is right (irrelevance)")
    for i, call in enumerate(value):
        if not isinstance(call, Mapping) or len(call) != 1:
            raise BfclFormatError(f"ground_truth[{i}]", "must be one {name: {argument: "
                                  "[allowed values]}} object")
        (name, args), = call.items()
        if name not in names:
            raise BfclFormatError(f"ground_truth[{i}]", f"names {name!r}, which is not among "
                                  f"the functions {sorted(names)}")
        if not isinstance(args, Mapping) or not all(isinstance(v, list) for v in args.values()):
            raise BfclFormatError(f"ground_truth[{i}].{name}", "must map each argument to a "
                                  "list of allowed values")
    return value


def parse_task(row: Any, source: str, index: int) -> BfclTask:
    """One line's JSON as a task; BfclFormatError names the field that is wrong."""
    if not isinstance(row, Mapping):
        raise BfclFormatError("(line)", "must be a JSON object")
    for key in ("id", "question", "function", "ground_truth"):
        if key not in row:
            raise BfclFormatError(key, "missing")
    task_id = row["id"]
    if not isinstance(task_id, str) or not task_id:
        raise BfclFormatError("id", "must be a non-empty string")
    functions = row["function"]
    if not isinstance(functions, list) or not functions:
        raise BfclFormatError("function", "must be a non-empty list of function docs")
    tools = [to_tool(f, f"function[{i}]") for i, f in enumerate(functions)]
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise BfclFormatError("function", f"two functions share a name: {names}")
    truth = row["ground_truth"]
    return BfclTask(
        uid=f"{source}/{task_id}", category=category_of(task_id), index=index, task_id=task_id,
        messages=_messages(row["question"]), functions=[dict(f) for f in functions], tools=tools,
        ground_truth=None if truth is None else _ground_truth(truth, functions))


def parse_lines(lines: Sequence[str], source: str, n: int | None = None, offset: int = 0
                ) -> tuple[list[BfclTask], list[Skipped]]:
    """Tasks `offset .. offset+n-1` of JSONL `lines` (blank lines are not counted); a line that
    cannot be used is `Skipped`, not fatal."""
    if offset < 0 or (n is not None and n < 0):
        raise ValueError("offset and n must be >= 0")
    numbered = [(i + 1, ln) for i, ln in enumerate(lines) if ln.strip()]
    end = len(numbered) if n is None else min(len(numbered), offset + n)
    tasks: list[BfclTask] = []
    skipped: list[Skipped] = []
    seen: dict[str, int] = {}
    for index in range(offset, end):
        line_no, text = numbered[index]
        task_id = None
        try:
            row = json.loads(text)
            task_id = row.get("id") if isinstance(row, dict) else None
            task = parse_task(row, source, index)
            if task.task_id in seen:
                raise BfclFormatError("id", f"{task.task_id!r} is already the id of line "
                                      f"{seen[task.task_id]}; ids must be unique")
            seen[task.task_id] = line_no
            tasks.append(task)
        except (json.JSONDecodeError, RecursionError) as err:
            skipped.append(Skipped(source, line_no, None, "(line)", f"not JSON ({err})"))
        except BfclFormatError as err:
            skipped.append(Skipped(source, line_no, task_id if isinstance(task_id, str) else None,
                                   err.field, str(err).split(": ", 1)[1]))
    return tasks, skipped


def load_categories(categories: Sequence[str] = CATEGORIES, n: int | None = None,
                    offset: int = 0) -> tuple[list[BfclTask], list[Skipped]]:
    """Tasks `offset .. offset+n-1` of each shipped category, category by category."""
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"unknown BFCL categories {unknown}; choose from {', '.join(CATEGORIES)}")
    tasks, skipped = [], []
    for category in categories:
        text = resources.files("specguard_bench").joinpath(f"data/bfcl/{category}.jsonl") \
            .read_text("utf-8")
        got, bad = parse_lines(text.splitlines(), "bfcl", n, offset)
        tasks += got
        skipped += bad
    if not tasks and not skipped:
        raise ValueError(f"offset {offset} selects no BFCL task")
    return tasks, skipped


def load_file(path: str | Path, n: int | None = None, offset: int = 0
              ) -> tuple[list[BfclTask], list[Skipped]]:
    """Tasks `offset .. offset+n-1` of a JSONL file in BFCL's format (`id`, `question`,
    `function`, `ground_truth`); `uid` is `<file stem>/<id>`. Lines selected but none usable
    is a BenchFileError naming the first (nothing would run)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--dataset-file {path} does not exist")
    tasks, skipped = parse_lines(read_text(path).splitlines(), path.stem, n, offset)
    skipped = [Skipped(str(path), s.line, s.task_id, s.field, s.error) for s in skipped]
    if not tasks:
        if not skipped:
            raise ValueError(f"{path}: offset {offset} selects no task")
        more = f" (and {len(skipped) - 1} more lines)" if len(skipped) > 1 else ""
        raise BenchFileError(f"{skipped[0]}{more}: no usable task in the selected lines of "
                             f"{path}; fix them or select others")
    return tasks, skipped
