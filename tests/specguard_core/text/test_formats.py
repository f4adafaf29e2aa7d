"""`ResponseFormat.of` (the forms callers pass), `check_answer` (the structural check of an
answer under a response format), `final_text` (the answer a JSON parser reads) and the format
instruction."""

from __future__ import annotations

import json

import pytest

from specguard_core.text.formats import ResponseFormat, check_answer, final_text, with_instruction

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
                                 {"type": "object", "properties": 5}])
def test_unknown_forms_and_invalid_schemas_are_errors(bad: object) -> None:
    with pytest.raises(ValueError):
        ResponseFormat.of(bad)


@pytest.mark.parametrize("partial", ['{"name": "Bo', '{"name": "Bob", "age": 4', '{"name": tr',
                                     "```json\n{", "", '{"name": "Bob", "age": -',
                                     '{"name": "Bob", "age": 4.', '{"name": "Bob", "age": 4e',
                                     '{"name": "Bob", "tags": ["a", nul', '{"name": "B\\',
                                     '{"name"', '{"name": "Bob",'])
def test_json_still_being_written_passes_until_the_answer_ends(partial: str) -> None:
    assert check_answer(partial, FMT, done=False) is None
    assert check_answer(partial, FMT, done=True) is not None


@pytest.mark.parametrize(("answer", "reason"), [
    ("Bob is 42.", "not JSON"),
    ('{"name": Bob', "not JSON"),  # not a prefix of any JSON: wrong already
    ('{"name": "Bob", "age": 4x', "not JSON"),
    ('{"name": "Bob"}', "'age' is a required property"),
    ('{"name": "Bob", "age": 42} and more', "text after it"),
    ("[1, 2]", "JSON object, got list"),
])
def test_answers_that_break_the_format(answer: str, reason: str) -> None:
    assert reason in (check_answer(answer, FMT, done=False) or "")


def test_whole_answers_that_match() -> None:
    for answer in ('{"name": "Bob", "age": 42}', '```json\n{"name": "Bob", "age": 42}\n```',
                   '\n {"name": "Bob", "age": 42} \n'):
        assert check_answer(answer, FMT, done=True) is None
    assert check_answer('{"anything": [1]}', ResponseFormat(), done=True) is None


@pytest.mark.parametrize("answer", [
    '```json\n{"name": "Bob", "age": 42}\n```', '```\n{"name": "Bob", "age": 42}\n```',
    '  {"name": "Bob", "age": 42}\n', '{"name": "Bob", "age": 42}```',
])
def test_final_text_is_the_json_the_check_accepted(answer: str) -> None:
    assert check_answer(answer, FMT, done=True) is None
    text = final_text(answer, FMT)
    assert json.loads(text) == {"name": "Bob", "age": 42}
    assert text == '{"name": "Bob", "age": 42}'  # the model's own JSON, not rewritten


def test_final_text_escapes_raw_control_characters_the_check_tolerates() -> None:
    answer = '```json\n{"name": "Bob\tSmith", "age": 42}\n```'  # a raw tab inside the string
    assert check_answer(answer, FMT, done=True) is None
    assert json.loads(final_text(answer, FMT)) == {"name": "Bob\tSmith", "age": 42}


def test_final_text_without_a_format_or_valid_json() -> None:
    fenced = '```json\n{"a": 1}\n```'
    assert final_text(fenced, None) == fenced  # plain text answers keep their fences
    assert final_text("```json\n{\"a\": ", ResponseFormat()) == '{"a":'  # cut off: unfenced


def test_the_instruction_joins_a_system_message_given_as_text_parts() -> None:
    parts = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}]
    (first, _) = with_instruction([{"role": "system", "content": parts},
                                   {"role": "user", "content": "hi"}], "Reply in JSON.")
    assert first["content"] == "Be brief.\nBe kind.\n\nReply in JSON."
