"""Sanity tests of the scripted pair in `helpers` (the script itself)."""

from __future__ import annotations

from typing import Any

from tests.specguard_integrations.langchain.helpers import shared_engine


def test_script_calls_the_named_tool_with_schema_arguments() -> None:
    engine = shared_engine()
    tools = [{"type": "function", "function": {"name": "other", "parameters": {}}},
             {"type": "function", "function": {"name": "add", "parameters": {
                 "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                 "required": ["a", "b"]}}}]
    result = engine.generate("Use add on 3 and 4", tools=tools)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("add", {"a": 3, "b": 4})]
    assert result.steps[0].source == "target"  # the draft's call lacked arguments


def test_script_answers_after_a_tool_response() -> None:
    engine = shared_engine()
    call = {"id": "1", "type": "function",
            "function": {"name": "add", "arguments": {"a": 3, "b": 4}}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is 3 + 4?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "1", "content": "7"},
    ]
    assert engine.generate(messages).text == "The tool returned 7.\n\nSo the answer is 7."
