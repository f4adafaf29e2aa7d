"""Sanity tests of the scripted pair in `helpers` (the script itself)."""

from __future__ import annotations

from typing import Any

from tests.specguard_integrations.llama_index.helpers import WEATHER, make_engine


def test_script_answers_tool_calls_and_results() -> None:
    engine = make_engine()
    out = engine.generate("What is the weather in 'Paris'?", tools=[WEATHER])
    assert [c.arguments for c in out.tool_calls] == [{"city": "Paris"}]
    assert out.steps[-1].source == "target" or out.steps[-2].source == "target"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is the weather in 'Paris'?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    assert engine.generate(messages, tools=[WEATHER]).text == "The tool says sunny.\n\nDone."


def test_script_greets_with_reasoning() -> None:
    out = make_engine().generate("hi")
    assert out.text == "Hello there.\n\nThe answer is 7."
    assert out.reasoning == "A simple greeting.\n\nNo tools needed."
