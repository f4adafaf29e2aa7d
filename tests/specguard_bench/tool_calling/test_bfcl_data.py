"""BFCL tasks: the shipped data, BFCL's function docs as JSON-Schema tools, and bad lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specguard_bench.tool_calling.bfcl_data import (
    CATEGORIES,
    category_of,
    load_categories,
    load_file,
    parse_lines,
    to_json_schema,
)
from specguard_core.text.chat import check_tools, parse_tool_call


def task_line(**changes: Any) -> str:
    row: dict[str, Any] = {
        "id": "simple_python_7",
        "question": [[{"role": "user", "content": "Area of a 3 by 4 rectangle?"}]],
        "function": [{"name": "geometry.area", "description": "Rectangle area.",
                      "parameters": {"type": "dict", "properties": {
                          "width": {"type": "float"}, "height": {"type": "float"}},
                          "required": ["width", "height"]}}],
        "ground_truth": [{"geometry.area": {"width": [3.0], "height": [4.0]}}]}
    row.update(changes)
    return json.dumps({k: v for k, v in row.items() if v is not ...})


def test_every_bfcl_type_maps_to_json_schema() -> None:
    doc = {"type": "dict", "required": ["a"], "properties": {
        "a": {"type": "integer", "description": "an int"},
        "b": {"type": "float", "default": 1.5},
        "c": {"type": "string", "enum": ["x", "y"]},
        "d": {"type": "boolean", "optional": True},
        "e": {"type": "array", "items": {"type": "float"}},
        "f": {"type": "tuple", "items": {"type": "integer"}},
        "g": {"type": "any", "description": "anything"},
        "h": {"type": "dict", "properties": {"inner": {"type": "array", "items": {
            "type": "dict", "properties": {"k": {"type": "tuple", "items": {"type": "any"}}}}}}},
    }}
    assert to_json_schema(doc, "parameters") == {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "integer", "description": "an int"},
        "b": {"type": "number", "default": 1.5},
        "c": {"type": "string", "enum": ["x", "y"]},
        "d": {"type": "boolean"},  # BFCL's `optional` is not JSON Schema: dropped
        "e": {"type": "array", "items": {"type": "number"}},
        "f": {"type": "array", "items": {"type": "integer"}},
        "g": {"description": "anything"},  # no type constraint
        "h": {"type": "object", "properties": {"inner": {"type": "array", "items": {
            "type": "object", "properties": {"k": {"type": "array", "items": {}}}}}}},
    }}


def test_dotted_names_are_offered_and_parsed_as_they_are() -> None:
    tasks, skipped = parse_lines([task_line()], "mine")
    assert not skipped
    tool = tasks[0].tools[0]
    assert tool["function"]["name"] == "geometry.area"
    assert check_tools([tool]) == [tool]  # the engine's own check accepts the dot
    text = '<tool_call>\n{"name": "geometry.area", "arguments": {"width": 3, "height": 4}}\n' \
           '</tool_call>'
    call = parse_tool_call(text, [tool])
    assert call.valid and call.name == "geometry.area" and call.arguments == {"width": 3, "height": 4}
    # and the schema check is the mapped one: a string where `float` was declared is invalid
    assert not parse_tool_call(text.replace("3", '"3"'), [tool]).valid


def test_the_shipped_categories_load_whole() -> None:
    tasks, skipped = load_categories()
    assert skipped == []
    assert {c: sum(t.category == c for t in tasks) for c in CATEGORIES} == {
        "simple_python": 200, "multiple": 100, "parallel": 100, "parallel_multiple": 100,
        "irrelevance": 120}
    assert all((t.ground_truth is None) == (t.category == "irrelevance") for t in tasks)
    two, _ = load_categories(("parallel", "irrelevance"), n=2, offset=1)
    assert [t.uid for t in two] == ["bfcl/parallel_1", "bfcl/parallel_2", "bfcl/irrelevance_1",
                                    "bfcl/irrelevance_2"]
    with pytest.raises(ValueError, match="unknown BFCL categories"):
        load_categories(("simple",))
    assert category_of("parallel_multiple_3") == "parallel_multiple"


@pytest.mark.parametrize(("line", "field", "words"), [
    (task_line(ground_truth=...), "ground_truth", "missing"),
    (task_line(question=...), "question", "missing"),
    (task_line(function=[{"name": "f", "parameters": {"type": "dict", "properties": {
        "x": {"type": "complex"}}}}], ground_truth=[{"f": {"x": [1]}}]),
     "function[0].parameters.properties.x.type", "unknown type 'complex'"),
    (task_line(function=[{"name": "f", "parameters": {"type": "dict", "properties": {
        "x": {"type": "string", "enum": "abc"}}}}], ground_truth=[{"f": {"x": ["a"]}}]),
     "function[0].parameters.properties.x.enum", "JSON Schema cannot express this"),
    (task_line(function=[{"name": "f", "parameters": {"type": "dict", "properties": {},
                                                      "required": "x"}}]),
     "function[0].parameters.required", "JSON Schema cannot express this"),
    (task_line(function=[{"description": "no name", "parameters": {"type": "dict"}}]),
     "function[0].name", "missing"),
    (task_line(ground_truth=[{"other": {"x": [1]}}]), "ground_truth[0]", "not among"),
    (task_line(ground_truth=[{"geometry.area": {"width": 3.0}}]),
     "ground_truth[0].geometry.area", "list of allowed values"),
    (task_line(question=[[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]),
     "question", "only single-turn"),
    ("{not json", "(line)", "not JSON"),
])
def test_a_bad_line_is_skipped_naming_line_and_field(line: str, field: str, words: str) -> None:
    good = task_line(id="simple_python_8")
    tasks, skipped = parse_lines([good, "", line, task_line(id="simple_python_9")], "mine.jsonl")
    assert [t.task_id for t in tasks] == ["simple_python_8", "simple_python_9"]  # the run goes on
    (bad,) = skipped
    assert (bad.line, bad.field) == (3, field) and words in bad.error  # line 3: blanks count
    assert str(bad).startswith("mine.jsonl:3") and field in str(bad)


def test_a_duplicate_id_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join([task_line(), task_line()]) + "\n")
    tasks, skipped = load_file(path)
    assert [t.uid for t in tasks] == ["mine/simple_python_7"]
    assert skipped[0].field == "id" and "line 1" in skipped[0].error
    assert skipped[0].source == str(path)
    with pytest.raises(ValueError, match="does not exist"):
        load_file(tmp_path / "none.jsonl")
