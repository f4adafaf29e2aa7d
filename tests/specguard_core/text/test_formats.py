"""`ResponseFormat.of` and `.structured` (the forms callers pass), `final_text` (the answer a
JSON parser reads) and the format instruction. The check-only path's check of an answer:
tests/specguard_core/decoding/test_answer_check.py."""

from __future__ import annotations

import json

import pytest

from specguard_core.text.formats import ResponseFormat, final_text, with_instruction

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
FMT = ResponseFormat(PERSON)


@pytest.mark.parametrize(("value", "expected"), [
    (None, None), ("text", None), ({"type": "text"}, None),
    ("json", ResponseFormat()), ({"type": "json_object"}, ResponseFormat()),
    ({"type": "json_schema", "json_schema": {"name": "Person", "schema": PERSON}},
     ResponseFormat(PERSON, "Person")),
    (PERSON, ResponseFormat(PERSON)),
])
def test_the_forms_callers_pass(value: object, expected: ResponseFormat | None) -> None:
    assert ResponseFormat.of(value) == expected


@pytest.mark.parametrize("bad", [3, "xml", {"type": "json_schema"},
                                 {"type": "object", "properties": 5},
                                 {"type": "object", "properties": {"a": {"pattern": "(a"}}},
                                 {"type": "object", "properties": {"a": {"$ref": "#/$defs/b"}}}])
def test_unknown_forms_and_invalid_schemas_are_errors(bad: object) -> None:
    with pytest.raises(ValueError):
        ResponseFormat.of(bad)


def test_patterns_are_taken() -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
              "patternProperties": {"^x_": {"type": "integer"}}}
    assert ResponseFormat.of(schema) == ResponseFormat(schema)


@pytest.mark.parametrize(("value", "expected"), [
    (None, None),
    ({"choice": ["yes", "no"]}, ResponseFormat(kind="choice", choices=("yes", "no"))),
    ({"regex": r"\d+"}, ResponseFormat(kind="regex", source=r"\d+")),
    ({"grammar": 'root ::= "a"'}, ResponseFormat(kind="grammar", source='root ::= "a"')),
    ({"json": PERSON}, ResponseFormat(PERSON)),
    ({"json": json.dumps(PERSON)}, ResponseFormat(PERSON)),
    ({"json_object": True}, ResponseFormat()),
])
def test_structured_outputs_forms(value: object, expected: ResponseFormat | None) -> None:
    got = ResponseFormat.structured(value)
    if expected is None:
        assert got is None
        return
    assert got is not None and got.strict and got.origin == "structured_outputs"
    assert (got.kind, got.schema, got.source, got.choices) == \
        (expected.kind, expected.schema, expected.source, expected.choices)
    assert got.constrained("check")  # a structured output is constrained under either mode


@pytest.mark.parametrize("bad", [{}, {"choice": []}, {"choice": ["a", 3]}, {"choice": [""]},
                                 {"regex": ""}, {"regex": "a", "choice": ["a"]}, {"json": "{x"},
                                 {"json": 5}, {"grammar": "  "}, {"json_object": "yes"},
                                 {"typo": "a"}, ["regex"]])
def test_bad_structured_outputs_say_what_they_take(bad: object) -> None:
    with pytest.raises(ValueError, match="structured_outputs"):
        ResponseFormat.structured(bad)


def test_which_formats_are_constrained_in_each_mode() -> None:
    loose, strict = ResponseFormat(PERSON), ResponseFormat(PERSON, strict=True)
    assert loose.constrained("constrain") and not loose.constrained("check")
    assert strict.constrained("constrain") and strict.constrained("check")


@pytest.mark.parametrize("answer", [
    '```json\n{"name": "Bob", "age": 42}\n```', '```\n{"name": "Bob", "age": 42}\n```',
    '  {"name": "Bob", "age": 42}\n', '{"name": "Bob", "age": 42}```',
])
def test_final_text_is_the_json_without_its_fence(answer: str) -> None:
    text = final_text(answer, FMT)
    assert json.loads(text) == {"name": "Bob", "age": 42}
    assert text == '{"name": "Bob", "age": 42}'  # the model's own JSON, not rewritten


def test_final_text_escapes_raw_control_characters() -> None:
    answer = '```json\n{"name": "Bob\tSmith", "age": 42}\n```'  # a raw tab inside the string
    assert json.loads(final_text(answer, FMT)) == {"name": "Bob\tSmith", "age": 42}


def test_final_text_without_a_format_or_valid_json() -> None:
    fenced = '```json\n{"a": 1}\n```'
    assert final_text(fenced, None) == fenced  # plain text answers keep their fences
    assert final_text("```json\n{\"a\": ", ResponseFormat()) == '{"a":'  # cut off: unfenced
    choice = ResponseFormat.structured({"choice": [" yes ", "no"]})
    assert final_text(" yes ", choice) == " yes "  # a structured output's text as written


def test_the_instruction_joins_a_system_message_given_as_text_parts() -> None:
    parts = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}]
    (first, _) = with_instruction([{"role": "system", "content": parts},
                                   {"role": "user", "content": "hi"}], "Reply in JSON.")
    assert first["content"] == "Be brief.\nBe kind.\n\nReply in JSON."
