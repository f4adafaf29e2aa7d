"""Scripts and inputs for the adversarial suite (tests/reliability): what a hostile or careless
caller sends, and what a misbehaving model writes."""

from __future__ import annotations

from typing import Any

WEATHER: dict[str, Any] = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "days": {"type": "integer"}},
                   "required": ["city"]}}}

# model-written calls keyed by a word in the prompt: the scripted models write them verbatim
CALLS = {
    "deep": '<tool_call>\n{"name": "get_weather", "arguments": {"city": '
            + "[" * 1200 + "]" * 1200 + "}}\n</tool_call>",
    "deepopen": '<tool_call>\n{"name": "get_weather", "arguments": {"city": ' + "[" * 1200,
    "deepbare": '{"name": "get_weather", "arguments": ' + '{"a": ' * 1200,
    "nested100": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": '
                 + "[" * 100 + "]" * 100 + "}}\n</tool_call>",
    "nan": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": NaN}}'
           "\n</tool_call>",
    "infinity": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": '
                "-Infinity}}\n</tool_call>",
    "good": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
    "add": '<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>',
}
# a whole bare call (no <tool_call> markers) nested past the JSON decoder's recursion limit
CALLS["deepbareclosed"] = ('{"name": "get_weather", "arguments": {"city": '
                           + "[" * 1200 + "]" * 1200 + "}}")


def script(prompt: str) -> str:
    """The reply for the last user message: a call from CALLS when the message is one of its keys,
    else an echo in two steps (so different prompts give different, checkable replies)."""
    last = prompt.rsplit("<|im_start|>user\n", 1)[-1].split("<|im_end|>", 1)[0].strip()
    if last in CALLS:
        return CALLS[last]
    return f"You said: {last}.\n\nThat is all."
