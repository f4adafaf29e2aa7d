"""The check-only path's structural check of an answer (`AnswerCheck`): the grammar of one JSON
object over the answer text's bytes, then the schema once the object is whole."""

from __future__ import annotations

import time

import pytest

from specguard_core.decoding.answer_check import AnswerCheck
from specguard_core.text.formats import ResponseFormat

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
FMT = ResponseFormat(PERSON)


@pytest.mark.parametrize("partial", ['{"name": "Bo', '{"name": "Bob", "age": 4', '{"name": tr',
                                     "```json\n{", "", '{"name": "Bob", "age": -',
                                     '{"name": "Bob", "age": 4', '{"name": "Bob",',
                                     '{"name": "B\\', '{"name"', "  \n{"])
def test_json_still_being_written_passes_until_the_answer_ends(partial: str) -> None:
    check = AnswerCheck(FMT)
    assert check(partial, done=False) is None
    assert check(partial, done=True) is not None


@pytest.mark.parametrize(("answer", "where"), [
    ("Bob is 42.", "'Bob is 42.'"),
    ('{"name": Bob', "'Bob'"),  # not a prefix of any JSON: wrong already
    ('{"name": "Bob", "age": 4x', "'x'"),
    ('{"name": "Bob", "age": 42} and more', "'and more'"),
    ("[1, 2]", "'[1, 2]'"),
])
def test_answers_that_break_json_fail_where_they_break(answer: str, where: str) -> None:
    reason = AnswerCheck(FMT)(answer, done=False)
    assert reason is not None and reason.endswith(f"breaks it at {where}"), reason


@pytest.mark.parametrize(("answer", "why"), [
    ('{"name": "Bob"}', "'age' is a required property"),
    ('{"name": "Bob", "age": "42"}', "is not of type 'integer'"),
])
def test_a_whole_object_off_the_schema_fails_at_once(answer: str, why: str) -> None:
    reason = AnswerCheck(FMT)(answer, done=False)  # the object is whole: the schema decides
    assert reason is not None and why in reason, reason


def test_properties_may_come_in_any_order() -> None:
    assert AnswerCheck(FMT)('{"age": 42, "name": "Bob"}', done=True) is None


def test_whole_answers_that_match() -> None:
    check = AnswerCheck(FMT)
    for answer in ('{"name": "Bob", "age": 42}', '```json\n{"name": "Bob", "age": 42}\n```',
                   '\n {"name": "Bob", "age": 42} \n', '```\n{"name": "Bob", "age": 42}```'):
        assert check(answer, done=True) is None, answer
    assert AnswerCheck(ResponseFormat())('{"anything": [1]}', done=True) is None


def test_the_check_follows_an_answer_as_it_grows_and_when_it_is_redone() -> None:
    check = AnswerCheck(FMT)
    assert check('{"name": "Bob", ', done=False) is None
    assert check('{"name": "Bob", "age": 4', done=False) is None
    assert check('{"name": "Bob", "age": x', done=False) is not None  # another next step
    assert check('{"name": "Bob", "age": 42}', done=True) is None


def test_patterns_are_checked_once_the_object_is_whole() -> None:
    fmt = ResponseFormat({"type": "object", "required": ["code"], "properties": {
        "code": {"type": "string", "pattern": "^(?!x)[A-Z]{3}$"}}})  # a look-ahead: any regex
    check = AnswerCheck(fmt)
    assert check('{"code": "AB1"', done=False) is None
    assert "does not match" in (check('{"code": "AB1"}', done=False) or "")
    assert check('{"code": "ABC"}', done=True) is None


def test_a_slow_pattern_is_refused_in_bounded_time() -> None:
    fmt = ResponseFormat({"type": "object", "properties": {
        "word": {"type": "string", "pattern": "^(?=a)(\\w+\\s?)*$"}}})
    answer = '{"word": "' + "a" * 5000 + '!"}'
    t0 = time.perf_counter()
    assert AnswerCheck(fmt)(answer, done=True) is not None
    assert time.perf_counter() - t0 < 5


def test_raw_control_characters_are_not_json() -> None:
    assert AnswerCheck(FMT)('{"name": "Bob\tSmith", "age": 42}', done=True) is not None
