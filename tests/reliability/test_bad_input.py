"""What a careless caller sends: each a clear InputError up front (saying what to do) or the
right behaviour, never a crash deep in a template, tokenizer or torch."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.text.chat import InputError, check_tools, normalise_messages, required_tool
from tests.reliability.reliability_helpers import WEATHER


# ---- messages -------------------------------------------------------------------------------
@pytest.mark.parametrize(("messages", "match"), [
    (None, "prompt string or a list"),
    (b"hello", "bytes; decode it"),
    (42, "prompt string or a list"),
    ({"role": "user", "content": "hi"}, "not one message dict"),
    (["hello"], "message 0 is a str"),
    ([None], "message 0 is a NoneType"),
    ([b"hi"], "message 0 is a bytes"),
    ([{"role": "user", "content": 5}], "content of type int"),
    ([{"role": "user", "content": b"hi"}], "content of type bytes"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
     "'image_url': SpecGuard's models read text only"),
    ([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
     "'input_audio'"),
    ([{"role": "user", "content": [{"type": "text"}]}], "not a text part"),
    ([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": None, "tool_calls": [
          {"id": "c1", "type": "function", "function": {"arguments": "{}"}}]}],
     "message 1, tool call 0 has no function name"),
    ([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "", "arguments": "{}"}}]}],
     "has no function name"),
    ([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "", "tool_calls": [
          {"id": "c1", "type": "function",
           "function": {"name": "get_weather", "arguments": '{"city": NaN}'}}]}],
     "arguments that are not JSON"),
    ([], "messages is empty"),
])
def test_bad_messages_are_clear_errors(engine: SpecGuardEngine, messages: Any,
                                       match: str) -> None:
    with pytest.raises(InputError, match=match):
        engine.generate(messages, tools=[WEATHER])


def test_developer_role_is_a_system_message(engine: SpecGuardEngine) -> None:
    text = engine.tokenizer.decode(engine.prompt_ids(
        [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "hi"}]))
    assert "<|im_start|>system\nAnswer in French." in text
    assert normalise_messages([{"role": "developer", "content": "x"}])[0]["role"] == "system"


def test_content_part_lists_join_their_text(engine: SpecGuardEngine) -> None:
    parts = [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]
    assert normalise_messages([{"role": "user", "content": parts}])[0]["content"] == \
        "first\nsecond"
    as_parts = engine.generate([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    as_text = engine.generate("hi")
    assert as_parts.text == as_text.text == "You said: hi.\n\nThat is all."


def test_input_messages_are_not_modified(engine: SpecGuardEngine) -> None:
    messages = [{"role": "developer", "content": [{"type": "text", "text": "x"}]},
                {"role": "user", "content": "hi"}]
    before = json.dumps(messages)
    engine.generate(messages)
    assert json.dumps(messages) == before


# ---- tools and tool_choice -----------------------------------------------------------------
@pytest.mark.parametrize(("tools", "match"), [
    (WEATHER, "must be a list of tool definitions"),
    ("get_weather", "must be a list of tool definitions"),
    (["get_weather"], "tool 0 is not an OpenAI-style function tool"),
    ([WEATHER, WEATHER], "two tools are named 'get_weather'"),
    ([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}}}}],
     "does not resolve inside the schema; SpecGuard never fetches"),
    ([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/nowhere"}}}}}],
     "'#/\\$defs/nowhere' that does not resolve"),
    ([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "other.json#/x"}}}}}],
     "does not resolve"),
])
def test_bad_tools_are_clear_errors(engine: SpecGuardEngine, tools: Any, match: str) -> None:
    with pytest.raises(InputError, match=match):
        engine.generate("hi", tools=tools)


@pytest.mark.parametrize("parameters", [None, "omitted"])
def test_a_tool_without_parameters_takes_no_arguments(engine: SpecGuardEngine,
                                                      parameters: Any) -> None:
    """`"parameters": None` (or no key) is a tool without arguments, as OpenAI reads it."""
    fn: dict[str, Any] = {"name": "add"} if parameters == "omitted" else \
        {"name": "add", "parameters": parameters}
    result = engine.generate("add", tools=[{"type": "function", "function": fn}])
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("add", {})]
    assert result.invalid_tool_calls == [] and result.finish_reason == "tool_calls"


@pytest.mark.parametrize("parameters", [[], "object", 3])
def test_tool_parameters_that_are_not_a_schema_object_are_clear_errors(
        engine: SpecGuardEngine, parameters: Any) -> None:
    tool = {"type": "function", "function": {"name": "add", "parameters": parameters}}
    with pytest.raises(InputError, match="tool 'add' has parameters of type .*JSON schema object"):
        engine.generate("add", tools=[tool])


def test_refs_inside_the_schema_and_its_ids_are_fine() -> None:
    schema = {"$id": "https://example.com/root.json", "type": "object",
              "$defs": {"c": {"$id": "city.json", "type": "string"}},
              "properties": {"a": {"$ref": "city.json"}, "b": {"$ref": "#/$defs/c"},
                             "self": {"$ref": "#"}}}
    assert check_tools([{"type": "function", "function": {"name": "f", "parameters": schema}}])


@pytest.mark.parametrize("choice", [
    {"type": "function"}, {"type": "function", "function": {}}, {"function": {"name": ""}}, 3.5,
])
def test_tool_choice_without_a_name_is_a_clear_error(engine: SpecGuardEngine,
                                                     choice: Any) -> None:
    with pytest.raises(InputError, match="tool_choice"):
        engine.generate("hi", tools=[WEATHER], tool_choice=choice)


def test_tool_choice_dict_forms() -> None:
    tools = check_tools([WEATHER])
    assert required_tool({"type": "required"}, tools) == "*"
    assert required_tool({"type": "auto"}, tools) is None
    assert required_tool({"type": "function", "name": "get_weather"}, tools) == "get_weather"


# ---- encodings ------------------------------------------------------------------------------
@pytest.mark.parametrize("messages", [
    "caf\udcff",  # what Python makes of an undecodable byte (surrogateescape)
    [{"role": "user", "content": "a\ud800b"}],
    [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}],
    [{"role": "user", "content": "hi", "name": "\ud83d"}],
])
def test_lone_surrogates_are_clear_errors(engine: SpecGuardEngine, messages: Any) -> None:
    with pytest.raises(InputError, match="lone surrogate"):
        engine.generate(messages)


def test_lone_surrogate_in_a_tool_is_a_clear_error(engine: SpecGuardEngine) -> None:
    tool = {"type": "function", "function": {**WEATHER["function"], "description": "\ud800"}}
    with pytest.raises(InputError, match="tool 'get_weather' contains"):
        engine.generate("hi", tools=[tool])


def test_a_lone_surrogate_escaped_in_prior_call_arguments_is_a_clear_error(
        engine: SpecGuardEngine) -> None:
    """The arguments string is valid Unicode; the JSON it holds decodes to a lone surrogate."""
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function", "function": {
                       "name": "get_weather", "arguments": '{"city": "\\ud800"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    with pytest.raises(InputError, match="message 1, tool call 0 .its arguments. contains"):
        engine.generate(history, tools=[WEATHER])


def test_multibyte_text_goes_through(engine: SpecGuardEngine) -> None:
    for text in ("天気はどう？", "emoji 🌧️ and ümlauts", "RTL שלום"):
        assert engine.generate(text).text == f"You said: {text}.\n\nThat is all."
