"""Model-written tool calls are untrusted input: whatever the model writes, `generate()` returns a
result (an invalid call at worst), never raises, and the result is strict JSON (no NaN)."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import pytest

from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.text.chat import check_tools, parse_tool_call
from specguard_core.text.steps import StepRules, is_bare_call, segment, step_end
from tests.reliability.reliability_helpers import CALLS, WEATHER

BIG = {"max_step_tokens": 3000, "max_new_tokens": 3000}  # room for a 1,200-deep call in one step


def _strict_json(result: Any) -> None:
    json.dumps(result.to_dict(), allow_nan=False)  # raises ValueError on NaN/Infinity


@pytest.mark.parametrize("key", ["deep", "deepopen"])
def test_call_nested_past_the_recursion_limit_is_an_invalid_call(engine: SpecGuardEngine,
                                                                 key: str) -> None:
    result = engine.generate(key, tools=[WEATHER], **BIG)
    assert result.tool_calls == [] and len(result.invalid_tool_calls) == 1
    assert "nested too deeply" in (result.invalid_tool_calls[0].error or "")
    assert result.steps[0].kind == "tool_call"
    _strict_json(result)


def test_bare_call_nested_past_the_recursion_limit_does_not_raise(
        engine: SpecGuardEngine) -> None:
    result = engine.generate("deepbare", tools=[WEATHER], **BIG)
    assert result.tool_calls == [] and result.finish_reason in ("stop", "length")
    _strict_json(result)


def test_whole_bare_call_nested_past_the_recursion_limit_is_an_invalid_call(
        engine: SpecGuardEngine) -> None:
    """A bare call too deep for the JSON decoder is still one tool-call step, reported."""
    result = engine.generate("deepbareclosed", tools=[WEATHER], **BIG)
    assert [s.kind for s in result.steps] == ["tool_call"]
    assert result.tool_calls == [] and len(result.invalid_tool_calls) == 1
    assert "nested too deeply" in (result.invalid_tool_calls[0].error or "")
    assert result.invalid_tool_calls[0].raw == CALLS["deepbareclosed"]
    _strict_json(result)


def test_arguments_deeper_than_64_levels_are_refused(engine: SpecGuardEngine) -> None:
    result = engine.generate("nested100", tools=[WEATHER])
    assert result.tool_calls == []
    assert "nested deeper than 64" in (result.invalid_tool_calls[0].error or "")
    assert result.invalid_tool_calls[0].arguments == {}


@pytest.mark.parametrize("key", ["nan", "infinity"])
def test_nan_and_infinity_arguments_are_refused_and_never_written_out(
        engine: SpecGuardEngine, key: str) -> None:
    result = engine.generate(key, tools=[WEATHER])
    assert result.tool_calls == [] and len(result.invalid_tool_calls) == 1
    # refused by the JSON reader (Hermes) or after transformers' parser (not a JSON number)
    assert re.search(r"is not (a )?JSON", result.invalid_tool_calls[0].error or "")
    _strict_json(result)


def test_the_scanners_survive_any_depth() -> None:
    rules = StepRules().with_tools(["get_weather"])
    for text in (CALLS["deep"], CALLS["deepopen"], CALLS["deepbare"], '{"a": ' * 100_000,
                 '{"name": ' + "[" * 100_000, "<tool_call>" + "[" * 100_000):
        step_end(text, rules)  # no RecursionError
        assert "".join(segment(text, rules)) == text
        is_bare_call(text, rules.bare_calls)
        call = parse_tool_call(text, check_tools([WEATHER]))
        assert not call.valid


def test_a_template_parser_that_raises_gives_an_invalid_call() -> None:
    class Exploding:
        response_template = {"declared": True}

        def parse_response(self, text: str, schema: Any = None, prefix: str = "",
                           tools: Any = None) -> Any:
            raise RuntimeError("the parser broke on this text")

    call = parse_tool_call("anything", check_tools([WEATHER]), Exploding())
    assert not call.valid and "the parser broke" in (call.error or "")


def test_non_string_tool_name_is_an_invalid_call() -> None:
    call = parse_tool_call('<tool_call>{"name": ["x"], "arguments": {}}</tool_call>',
                           check_tools([WEATHER]))
    assert not call.valid and "name must be a JSON string" in (call.error or "")


def test_validation_with_an_unresolvable_ref_never_raises_or_fetches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """check_tools refuses such schemas; a tool list that skipped it still never raises."""
    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a schema must never be fetched")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    for ref in ("https://example.com/city.json", "#/$defs/missing"):
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"$ref": ref}}}}}]
        call = parse_tool_call('<tool_call>{"name": "get_weather", "arguments": {"city": "x"}}'
                               "</tool_call>", tools)
        assert not call.valid and "schema cannot be checked" in (call.error or "")


def test_a_local_ref_validates_at_call_time() -> None:
    tools = check_tools([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "$defs": {"city": {"type": "string"}}, "type": "object",
        "properties": {"city": {"$ref": "#/$defs/city"}}, "required": ["city"]}}}])
    good = parse_tool_call(CALLS["good"], tools)
    bad = parse_tool_call('<tool_call>{"name": "get_weather", "arguments": {"city": 5}}'
                          "</tool_call>", tools)
    assert good.valid and not bad.valid and "not of type 'string'" in (bad.error or "")
