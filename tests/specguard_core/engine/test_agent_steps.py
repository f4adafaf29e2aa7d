"""One agent turn through the real engine with scripted models: tool-call steps verified twice."""

from __future__ import annotations

import json

import pytest

from specguard_core.testing import scripted_engine
from tests.fixtures import WEATHER

GOOD_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def target_script(prompt: str) -> str:
    if "<tool_response>" in prompt:
        return "It is sunny in Paris."
    return "I will look it up.\n\n" + GOOD_CALL


@pytest.mark.parametrize("bad_call", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"\n</tool_call>',  # JSON
    '<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris"}}\n</tool_call>',  # tool
    '<tool_call>\n{"name": "get_weather", "arguments": {"town": "Paris"}}\n</tool_call>',  # schema
])
def test_invalid_draft_tool_call_is_regenerated_by_target(bad_call: str) -> None:
    engine = scripted_engine(target_script, lambda p: "I will look it up.\n\n" + bad_call)
    result = engine.generate("Weather in Paris?", tools=[WEATHER])
    kinds = [(s.kind, s.source) for s in result.steps]
    assert kinds[:2] == [("answer", "draft"), ("tool_call", "target")]
    call_step = result.steps[1]
    assert call_step.rejected_reason and call_step.draft_text == bad_call
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert result.tool_calls[0].arguments == {"city": "Paris"}
    assert result.finish_reason == "tool_calls" and result.text == "I will look it up."


def test_invalid_call_from_both_models_is_reported_not_raised() -> None:
    bad = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    engine = scripted_engine(lambda p: bad)
    result = engine.generate("Weather in Paris?", tools=[WEATHER])
    assert result.tool_calls == []
    assert len(result.invalid_tool_calls) == 1
    assert "unknown tool" in (result.invalid_tool_calls[0].error or "")


def test_tool_results_feed_the_next_turn() -> None:
    engine = scripted_engine(target_script)
    history = [{"role": "user", "content": "Weather in Paris?"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "c1", "type": "function",
                    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    result = engine.generate(history, tools=[WEATHER])
    assert result.text == "It is sunny in Paris." and result.finish_reason == "stop"


def test_required_tool_choice_leaves_room_for_calls_only() -> None:
    engine = scripted_engine(target_script)  # both models would write prose before the call
    result = engine.generate("Weather in Paris?", tools=[WEATHER], tool_choice="required")
    first = result.steps[0]
    assert first.kind == "tool_call" and first.text == GOOD_CALL
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert result.text == "" and result.finish_reason == "tool_calls"


def test_named_tool_choice_leaves_room_for_that_tool_only() -> None:
    other = {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {}}}}
    draft = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    engine = scripted_engine(lambda p: GOOD_CALL, lambda p: draft)
    result = engine.generate("Weather?", tools=[WEATHER, other], tool_choice="get_weather")
    assert not any("get_time" in (s.draft_text or s.text) for s in result.steps)
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert result.tool_calls[0].arguments == {"city": "Paris"}


def test_tool_choice_none_offers_no_tools() -> None:
    engine = scripted_engine(lambda p: "No tools here." if "<tools>" not in p else GOOD_CALL)
    result = engine.generate("Weather?", tools=[WEATHER], tool_choice="none")
    assert result.text == "No tools here." and not result.tool_calls


def test_reasoning_is_reported_apart_from_the_answer() -> None:
    engine = scripted_engine(lambda p: "<think>Paris is in France.\n\nSo: Paris.</think>Paris.")
    result = engine.generate("Capital of France?")
    assert [s.kind for s in result.steps] == ["reasoning", "reasoning", "answer"]
    assert result.reasoning == "Paris is in France.\n\nSo: Paris."
    assert result.text == "Paris."


def test_unconfident_draft_steps_go_to_the_target() -> None:
    engine = scripted_engine(lambda p: "Step one.\n\nStep two.", draft_sharpness=0.5)
    result = engine.generate("Go.", tau=0.9)  # grounding is perfect, so only confidence decides
    assert all(s.source == "target" for s in result.steps)
    assert all(s.confidence is not None and s.confidence < -3 for s in result.steps)
    assert result.text == "Step one.\n\nStep two."


def test_bare_and_fenced_json_calls_are_verified_tool_calls() -> None:
    bare = '{"name": "get_weather", "arguments": {"town": "Paris"}}'  # schema-invalid
    fenced = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
    engine = scripted_engine(lambda p: fenced, lambda p: bare)
    result = engine.generate("Weather in Paris?", tools=[WEATHER])
    step = result.steps[0]
    assert step.kind == "tool_call" and step.source == "target"
    assert "'city' is a required property" in (step.rejected_reason or "")
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert result.text == ""


def test_a_call_without_its_closer_ends_the_turn_before_the_prose() -> None:
    unclosed = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
    engine = scripted_engine(lambda p: unclosed + "\nIt will be sunny, I guess.")
    result = engine.generate("Weather in Paris?", tools=[WEATHER])
    assert [c.arguments for c in result.tool_calls] == [{"city": "Paris"}]
    assert result.finish_reason == "tool_calls"
    assert "sunny" not in "".join(s.text for s in result.steps)


TWO_CALLS = GOOD_CALL + "\n" + GOOD_CALL.replace("Paris", "Rome")


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_no_parallel_calls_ends_the_reply_with_its_first_call(tool_choice: str) -> None:
    engine = scripted_engine(lambda p: TWO_CALLS)
    both = engine.generate("Weather in Paris and Rome?", tools=[WEATHER], tool_choice=tool_choice)
    assert [c.arguments["city"] for c in both.tool_calls] == ["Paris", "Rome"]
    one = engine.generate("Weather in Paris and Rome?", tools=[WEATHER], tool_choice=tool_choice,
                          parallel_tool_calls=False)
    assert [c.arguments["city"] for c in one.tool_calls] == ["Paris"]
    assert one.finish_reason == "tool_calls"
    assert [s.kind for s in one.steps] == ["tool_call"]  # the second call was never written
    assert one.usage.completion_tokens < both.usage.completion_tokens


def test_parallel_tool_calls_must_be_a_bool() -> None:
    from specguard_core.text.errors import InputError

    engine = scripted_engine(lambda p: GOOD_CALL)
    with pytest.raises(InputError, match="parallel_tool_calls must be true or false"):
        engine.generate("Weather?", tools=[WEATHER], parallel_tool_calls="no")  # type: ignore[arg-type]
