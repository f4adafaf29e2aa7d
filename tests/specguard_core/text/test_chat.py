"""Rendering conversations with tools through two template families; parsing tool calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specguard_core.testing import build_tokenizer
from specguard_core.text.chat import (
    InputError,
    check_tools,
    normalise_messages,
    parse_tool_call,
    render_prompt,
    required_tool,
    token_bytes,
)
from specguard_core.text.tool_calls import response_template
from tests.fixtures import LLAMA_STYLE_TEMPLATE, WEATHER

HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    {"role": "user", "content": "And tomorrow?"},
]


@pytest.fixture(scope="module", params=["qwen", "llama"])
def tokenizer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = Path(tmp_path_factory.mktemp(request.param))
    if request.param == "qwen":
        return build_tokenizer(folder)
    return build_tokenizer(folder, template=LLAMA_STYLE_TEMPLATE)


def test_renders_tools_and_the_whole_agent_history(tokenizer: Any) -> None:
    text = render_prompt(tokenizer, normalise_messages(HISTORY), check_tools([WEATHER]))
    assert '"name": "get_weather"' in text  # the tool definition, as JSON
    assert "Paris" in text and "sunny, 21 C" in text and "And tomorrow?" in text
    assert text.endswith("assistant\n")
    assert text.index("sunny, 21 C") < text.index("And tomorrow?")


def test_qwen_family_renders_hermes_blocks(tmp_path: Path) -> None:
    text = render_prompt(build_tokenizer(tmp_path), normalise_messages(HISTORY),
                         check_tools([WEATHER]))
    assert "<tools>" in text and "<tool_call>" in text and "<tool_response>" in text


def test_template_that_cannot_render(tmp_path: Path) -> None:
    tok = build_tokenizer(tmp_path, template="{{ raise_exception('roles must alternate') }}")
    with pytest.raises(InputError, match="roles must alternate"):
        render_prompt(tok, normalise_messages("hi"), [])


@pytest.mark.parametrize("bad", [
    {"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}},
    {"type": "function", "function": {"name": "f", "parameters": {"properties": 3}}},
    {"type": "retrieval"},
    {"type": "function", "function": {"description": "no name"}},
])
def test_invalid_tool_definitions(bad: dict[str, Any]) -> None:
    with pytest.raises(InputError, match="tool"):
        check_tools([bad])


def test_bad_roles_and_arguments() -> None:
    with pytest.raises(InputError, match="role"):
        normalise_messages([{"role": "robot", "content": "beep"}])


@pytest.mark.parametrize(("text", "error"), [
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>', None),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"\n</tool_call>',
     "unparseable"),
    ('<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>', "unknown tool"),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"days": 2}}\n</tool_call>',
     "'city' is a required property"),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": 5}}\n</tool_call>',
     "not of type 'string'"),
])
def test_parse_and_verify_tool_calls(text: str, error: str | None) -> None:
    call = parse_tool_call(text, check_tools([WEATHER]))
    if error is None:
        assert call.valid and call.name == "get_weather" and call.arguments == {"city": "Oslo"}
        assert call.id.startswith("call_")
    else:
        assert not call.valid and error in (call.error or "")


def test_tool_choice_forms() -> None:
    tools = check_tools([WEATHER])
    assert required_tool("auto", tools) is None and required_tool("none", tools) is None
    assert required_tool("required", tools) == required_tool("any", tools) == "*"
    assert required_tool("get_weather", tools) == "get_weather"
    assert required_tool({"type": "function", "function": {"name": "get_weather"}},
                         tools) == "get_weather"
    with pytest.raises(InputError, match="not among the tools"):
        required_tool("nope", tools)


def test_uses_the_tokenizers_response_parser_when_it_has_one() -> None:
    class WithResponseTemplate:
        response_template = {"declared": True}

        def parse_response(self, text: str, schema: Any = None, prefix: str = "",
                           tools: Any = None) -> dict[str, Any]:
            assert prefix == "" and tools
            return {"role": "assistant",
                    "tool_calls": [{"type": "function", "function": {
                        "name": "get_weather", "arguments": {"city": "Rome"}}}]}

    call = parse_tool_call("[TOOL_CALLS]get_weather[ARGS]{...}", check_tools([WEATHER]),
                           WithResponseTemplate())
    assert call.valid and call.arguments == {"city": "Rome"}


class _Model:  # just what `response_template` reads: config.model_type
    def __init__(self, model_type: str) -> None:
        self.config = type("Config", (), {"model_type": model_type})()


def test_the_template_transformers_ships_for_the_model_type_parses_calls(tmp_path: Path) -> None:
    """A tokenizer without a response template of its own gets the one transformers ships for
    its model's type; calls are read by transformers' parser, which casts arguments by the
    tool's schema ("3" for an integer parameter), where the Hermes parser keeps the string."""
    tok = build_tokenizer(tmp_path / "tok")
    assert getattr(tok, "response_template", None) is None
    tools = check_tools([WEATHER])
    template = response_template(tok, None, _Model("qwen2"))  # the first model with a type
    assert template is not None and "tool_calls" in template["fields"]
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": "3"}}\n</tool_call>'
    call = parse_tool_call(text, tools, tok, template)
    assert call.valid and call.arguments == {"city": "Rome", "days": 3}
    hermes = parse_tool_call(text, tools, tok)  # no template: the Hermes parser
    assert not hermes.valid and "'3' is not of type 'integer'" in (hermes.error or "")
    # a bare JSON call, which the template does not see as one, still parses (Hermes fallback)
    bare = parse_tool_call('{"name": "get_weather", "arguments": {"city": "Oslo"}}', tools, tok,
                           template)
    assert bare.valid and bare.arguments == {"city": "Oslo"}
    # a format with no regex of ours: Gemma 4's call markup, by its model type
    gemma = response_template(tok, _Model("gemma4"))
    assert gemma is not None
    call = parse_tool_call('<|tool_call>call:get_weather{city:<|"|>Lima<|"|>}<tool_call|>',
                           tools, None, gemma)
    assert call.valid and call.name == "get_weather" and call.arguments == {"city": "Lima"}
    assert response_template(tok, _Model("no-such-type")) is None
    assert response_template(tok) is None


def test_token_bytes_are_the_tokens_own_even_mid_character(tmp_path: Path) -> None:
    tok = build_tokenizer(tmp_path / "tok")
    text = "数学 is fun: 42 ✓"
    ids = tok.encode(text, add_special_tokens=False)
    pieces = [tok.decode([i]) for i in ids]
    assert any("\ufffd" in p for p in pieces)  # some tokens hold part of a character
    raw = b"".join(token_bytes(tok, i, p) for i, p in zip(ids, pieces, strict=True))
    assert raw == text.encode("utf-8")


def test_answer_logprobs_bytes_join_to_the_answer() -> None:
    from specguard_core.testing import scripted_engine
    from specguard_core.text.logprobs import answer_logprobs

    answer = "答案是 42。"
    engine = scripted_engine(lambda p: answer)
    result = engine.generate("Go", tau=-1e9, k=1, temperature=0.0)
    entries = answer_logprobs(result, engine.token_text)
    assert entries and b"".join(bytes(e["bytes"]) for e in entries) == answer.encode("utf-8")
    assert any(e["token"] == "\ufffd" for e in entries)
