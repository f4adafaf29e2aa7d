"""The one `tool_choice` parser and the one way an input error shows a caller's value."""

from __future__ import annotations

from typing import Any

import pytest

from specguard_core.text.chat import InputError, check_tools, required_tool
from specguard_core.text.errors import QUOTE_LIMIT, quoted
from specguard_core.text.tool_choice import ParsedToolChoice, parse_tool_choice
from tests.fixtures import WEATHER

TIME = {"type": "function", "function": {"name": "get_time", "parameters": None}}
AUTO_TOOL = {"type": "function", "function": {"name": "auto", "parameters": None}}


@pytest.mark.parametrize(("choice", "parsed"), [
    (None, ParsedToolChoice("auto")),
    ("auto", ParsedToolChoice("auto")),
    ("none", ParsedToolChoice("none")),
    ("required", ParsedToolChoice("required")),
    ("any", ParsedToolChoice("required", openai=False)),
    (True, ParsedToolChoice("required", openai=False)),
    (False, ParsedToolChoice("auto", openai=False)),
    ("get_time", ParsedToolChoice("function", "get_time", openai=False)),
    ({"type": "function", "function": {"name": "get_time"}},
     ParsedToolChoice("function", "get_time")),
    ({"type": "function", "name": "get_time"},
     ParsedToolChoice("function", "get_time", openai=False)),
    ({"type": "tool", "name": "get_time"}, ParsedToolChoice("function", "get_time", openai=False)),
    ({"name": "get_time"}, ParsedToolChoice("function", "get_time", openai=False)),
    ({"type": "auto", "disable_parallel_tool_use": True}, ParsedToolChoice("auto", openai=False)),
    ({"type": "none"}, ParsedToolChoice("none", openai=False)),
    ({"type": "any"}, ParsedToolChoice("required", openai=False)),
    ({"type": "function", "function": {"name": "auto"}}, ParsedToolChoice("function", "auto")),
])
def test_every_form_parses(choice: Any, parsed: ParsedToolChoice) -> None:
    assert parse_tool_choice(choice) == parsed


@pytest.mark.parametrize(("choice", "match"), [
    ("", "empty string"),
    ("  ", "empty string"),
    ({"type": "function"}, "names no tool"),
    ({"type": "tool", "name": 5}, "names no tool"),
    ({"type": "allowed_tools", "tools": []}, "has type 'allowed_tools', which is not"),
    (3.5, "tool_choice is 3.5, which is not a tool choice"),
    (["auto"], "tool_choice is a value of type list"),
])
def test_unknown_forms_name_the_rule(choice: Any, match: str) -> None:
    with pytest.raises(InputError, match=match):
        parse_tool_choice(choice)


def test_a_tool_named_like_a_mode_stays_a_tool() -> None:
    tools = check_tools([WEATHER, AUTO_TOOL])
    named = parse_tool_choice({"type": "function", "function": {"name": "auto"}})
    assert named.required(tools) == "auto"
    assert parse_tool_choice(named.engine_value()) == named
    assert required_tool(named.engine_value(), tools) == "auto"
    assert required_tool("auto", tools) is None


@pytest.mark.parametrize("choice", ["get_time", {"type": "function",
                                                "function": {"name": "get_time"}}])
def test_engine_value_parses_back_to_the_same_choice(choice: Any) -> None:
    parsed = parse_tool_choice(choice)
    assert parse_tool_choice(parsed.engine_value()).required(check_tools([TIME])) == "get_time"


def test_required_with_and_without_tools() -> None:
    tools = check_tools([WEATHER])
    assert parse_tool_choice("required").required(tools) == "*"
    assert parse_tool_choice("required").required([]) is None
    assert parse_tool_choice("none").required(tools) is None
    with pytest.raises(InputError, match="not among the tools offered \\(none are\\)"):
        parse_tool_choice("get_weather").required([])


def test_an_unknown_tool_name_is_quoted_bounded() -> None:
    long = "x" * 5000 + "\n<script>"
    with pytest.raises(InputError) as caught:
        required_tool(long, check_tools([WEATHER]))
    message = str(caught.value)
    assert "tool_choice names 'xxxx" in message and "<script>" not in message
    assert len(message) < 200


# ---- quoted ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "shown"), [
    ("get_weather", "'get_weather'"),
    ("it's", "'it\\'s'"),
    ("a\\b", "'a\\\\b'"),
    ("line\nbreak\x00", "'line\\nbreak\\x00'"),
    ("café ☃", "'caf\\xe9 \\u2603'"),
    ("\udcff", "'\\udcff'"),
    (None, "None"), (True, "True"), (3, "3"), (2.5, "2.5"), (float("nan"), "nan"),
    (10**50, "a value of type int"),
    ({"secret": "x"}, "a value of type dict"),
    (["a"], "a value of type list"),
])
def test_quoted_shows_printable_ascii_only(value: Any, shown: str) -> None:
    assert quoted(value) == shown


def test_quoted_cuts_long_text_after_the_limit() -> None:
    assert quoted("a" * 100) == "'" + "a" * QUOTE_LIMIT + "'..."
    assert quoted("a" * QUOTE_LIMIT) == "'" + "a" * QUOTE_LIMIT + "'"
    emoji = quoted("😀" * 100)  # each one escapes to ten characters
    assert emoji == "'" + "\\U0001f600" * (QUOTE_LIMIT // 10) + "'..."
    assert quoted("b" * 500, limit=200) == "'" + "b" * 200 + "'..."


@pytest.mark.parametrize("value", ["x" * 10_000, "<b>" * 50, "\u202e" * 99, "'" * 300])
def test_quoted_text_is_short_printable_ascii(value: str) -> None:
    shown = quoted(value)
    assert len(shown) <= QUOTE_LIMIT + 5 and shown.isascii() and shown.isprintable()
