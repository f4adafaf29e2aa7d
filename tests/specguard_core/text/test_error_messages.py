"""The text layer's input errors show a caller's value short and printable: a library's caller
sees which value was wrong, a server relaying the message never reflects long or odd text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from specguard_core.testing import build_tokenizer
from specguard_core.text.chat import (
    InputError,
    check_template_kwargs,
    check_tools,
    normalise_messages,
    render_prompt,
    required_tool,
)
from specguard_core.text.formats import ResponseFormat
from tests.fixtures import WEATHER

# starts plainly (so a message can show it), then a right-to-left override, markup, a long run
# and a line break: what a message must never carry whole
HOSTILE = "zq-\u202e<b>" + "x" * 5000 + "\nEND"
SHOWN = "'zq-\\u202e<b>xxx"  # how its start reads in a quoted value


def tool(name: str, parameters: Any = None) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return build_tokenizer(Path(tmp_path_factory.mktemp("tok")))


@pytest.fixture(scope="module")
def raising_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return build_tokenizer(Path(tmp_path_factory.mktemp("raising")),
                           template="{{ raise_exception(messages[0]['content']) }}")


CASES: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("role", lambda tok, bad: normalise_messages([{"role": HOSTILE, "content": "hi"}])),
    ("content part type", lambda tok, bad: normalise_messages(
        [{"role": "user", "content": [{"type": HOSTILE}]}])),
    ("duplicate tool name", lambda tok, bad: check_tools([tool(HOSTILE), tool(HOSTILE)])),
    ("parameters of a wrong type", lambda tok, bad: check_tools([tool(HOSTILE, 3)])),
    ("invalid schema", lambda tok, bad: check_tools([tool("f", {"type": HOSTILE})])),
    ("unresolvable $ref", lambda tok, bad: check_tools(
        [tool("f", {"type": "object", "properties": {"a": {"$ref": "#/$defs/" + HOSTILE}}})])),
    ("lone surrogate in a tool", lambda tok, bad: check_tools(
        [tool(HOSTILE, {"type": "object", "description": "\ud800"})])),
    ("tool_choice name", lambda tok, bad: required_tool(HOSTILE, check_tools([WEATHER]))),
    ("tool_choice type", lambda tok, bad: required_tool({"type": HOSTILE}, [])),
    ("template variable", lambda tok, bad: check_template_kwargs(cast(dict[str, Any], {(HOSTILE,): 1}))),
    ("prior call arguments", lambda tok, bad: render_prompt(tok, normalise_messages([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": HOSTILE, "arguments": "{no"}}]}]), [])),
    ("template error", lambda tok, bad: render_prompt(
        bad, normalise_messages([{"role": "user", "content": HOSTILE}]), [])),
    ("response_format schema", lambda tok, bad: ResponseFormat.of(
        {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": HOSTILE}}})),
    ("response_format form", lambda tok, bad: ResponseFormat.of(HOSTILE)),
]


@pytest.mark.parametrize(("what", "call"), CASES, ids=[c[0] for c in CASES])
def test_a_refused_value_is_shown_short_and_printable(
        tokenizer: Any, raising_tokenizer: Any, what: str, call: Callable[[Any, Any], Any]
) -> None:
    with pytest.raises(ValueError) as caught:
        call(tokenizer, raising_tokenizer)
    message = str(caught.value)
    assert message.isascii() and message.isprintable(), message
    assert len(message) < 400 and "x" * 200 not in message and "END" not in message, message
    assert "zq-" in message, message  # which value it was
    if what == "prior call arguments":  # the engine's own check, not the template's
        assert message.startswith(f"tool call {SHOWN}") and "template" not in message


def test_input_errors_are_value_errors_from_one_class() -> None:
    from specguard_core.text import errors

    assert InputError is errors.InputError and issubclass(InputError, ValueError)
