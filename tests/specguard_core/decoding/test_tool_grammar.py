"""Tool calls under a grammar: forced calls and strict tools, on tiny random models (float32).

A random model writes no call of its own, so a valid call is the grammar's doing. The lossless
claim is checked against transformers' greedy `generate` with the same grammar as a logits
processor: with `acceptance="exact"` the engine's reply is that text token for token."""

from __future__ import annotations

import json
import math
from typing import Any

import jsonschema
import pytest

from specguard_core import EngineConfig, SpecGuardConfig, SpecGuardEngine
from specguard_core.decoding.tool_grammar import call_format, calls_lark
from specguard_core.testing import build_tokenizer
from specguard_core.text.chat import check_tools
from specguard_core.text.errors import InputError
from tests.specguard_core.decoding.test_grammar import greedy_under
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair

WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "additionalProperties": False, "required": ["city", "unit"],
    "properties": {"city": {"enum": ["Paris", "Oslo"]}, "unit": {"enum": ["C", "F"]}}}}}
CLOCK = {"type": "function", "function": {"name": "clock", "parameters": {
    "type": "object", "additionalProperties": False, "required": ["zone"],
    "properties": {"zone": {"enum": ["UTC", "CET"]}}}}}
TOOLS = [WEATHER, CLOCK]
QUESTION = "Weather in Paris?"
EXACT = dict(k=1, temperature=0.0, max_new_tokens=60, max_step_tokens=64, acceptance="exact",
             action_acceptance="exact", fallback="speculative")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any, Any]:
    return noisy_copy_pair(tmp_path_factory.mktemp("tool-grammar"))


@pytest.fixture(scope="module")
def engine(pair: tuple[Any, Any, Any, Any]) -> SpecGuardEngine:
    return SpecGuardEngine(*pair, config=SpecGuardConfig(**EXACT))


def lark(engine: SpecGuardEngine, tools: list[dict[str, Any]], required: str | None) -> str:
    fmt = call_format(engine.tokenizer, "<tool_call>", "</tool_call>")
    assert fmt is not None
    text = calls_lark(check_tools(tools), required, fmt)
    assert text is not None
    return text


def constrained_greedy(model: Any, engine: SpecGuardEngine, required: str, n: int,
                       question: str = QUESTION, tools: list[dict[str, Any]] = TOOLS
                       ) -> list[int]:
    """`model`'s greedy reply under the calls' grammar."""
    prompt = engine.prompt_ids(question, tools=tools)
    grammar = engine.grammars.for_lark(lark(engine, tools, required), len(prompt), "test")
    return greedy_under(model, prompt, grammar, n)


@pytest.mark.parametrize("required", ["weather", "required"])
@pytest.mark.parametrize("overrides", [
    dict(route="check", check_tokens=4),  # every step through the target's check
    dict(route="score", tau=math.inf),  # every step through the fallback
    dict(route="score", tau=-math.inf),  # the score keeps every step: a call is checked still
])
def test_forced_call_is_the_targets_constrained_greedy_call(engine: SpecGuardEngine,
                                                            required: str,
                                                            overrides: dict[str, Any]) -> None:
    result = engine.generate(QUESTION, tools=TOOLS, tool_choice=required, **overrides)
    ids = [t for s in result.steps for t in s.token_ids]
    owed = "*" if required == "required" else required
    assert ids == constrained_greedy(engine.target.model, engine, owed, 60)[: len(ids)]  # type: ignore
    assert result.text == "" and result.tool_calls
    if required == "weather":  # one call, then the end
        assert result.finish_reason == "tool_calls" and not result.invalid_tool_calls
    else:  # calls, one after another: this random target writes them until the budget ends
        assert result.finish_reason in ("tool_calls", "length")
    names = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for call in result.tool_calls:
        assert required == "required" or call.name == required
        jsonschema.validate(call.arguments, names[call.name])
    if overrides["route"] == "check":
        assert {s.path for s in result.steps} & {"target-checked", "target-verified"}


def test_masks_allow_what_strict_tools_allow(engine: SpecGuardEngine) -> None:
    strict_weather = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
    grammar = engine.grammars.for_lark(lark(engine, [strict_weather, CLOCK], None), 0, "test")
    tok = engine.tokenizer

    def fits(text: str) -> bool:
        return grammar.allowed(tok.encode(text, add_special_tokens=False)) is not None

    call = '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
    assert fits("I will look. " + call % ("weather", '{"city": "Oslo", "unit": "C"}'))
    assert fits("The answer is 12.")  # auto: an answer needs no call
    assert not fits(call % ("weather", '{"city": "Rome", "unit": "C"}'))  # strict: schema holds
    assert fits(call % ("clock", '{"zone": "anything", "extra": 1}'))  # not strict: any object
    assert not fits(call % ("alarm", "{}"))  # only offered tools can be named


def test_no_grammar_without_an_owed_call_or_a_strict_tool(engine: SpecGuardEngine) -> None:
    fmt = call_format(engine.tokenizer, "<tool_call>", "</tool_call>")
    assert fmt is not None and calls_lark(check_tools(TOOLS), None, fmt) is None
    assert call_format(engine.tokenizer, None, None) is None


def test_a_think_block_may_open_only_a_thinking_template(tmp_path: Any) -> None:
    plain = build_tokenizer(tmp_path / "plain")
    thinking = build_tokenizer(tmp_path / "thinking",
                               template=plain.chat_template + "{# <think> #}")
    plain_fmt = call_format(plain, "<tool_call>", "</tool_call>")
    fmt = call_format(thinking, "<tool_call>", "</tool_call>")
    assert plain_fmt is not None and plain_fmt.think is None
    assert fmt is not None and fmt.think is not None
    assert "start: think? call" in (calls_lark(check_tools(TOOLS), "weather", fmt) or "")


def test_strict_tools_are_refused_where_they_cannot_be_honoured(
        pair: tuple[Any, Any, Any, Any]) -> None:
    hetero = SpecGuardEngine(*pair, config=SpecGuardConfig(**EXACT),
                             engine_config=EngineConfig(heterogeneous=True))
    hetero.same_vocab = False  # a shared tokenizer, but treated as a heterogeneous pair
    strict = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
    with pytest.raises(InputError, match="drop 'strict' from the tools"):
        hetero.generate(QUESTION, tools=[strict])
    forced = hetero.generate(QUESTION, tools=TOOLS, tool_choice="weather", max_new_tokens=12)
    assert forced.steps[0].text.startswith('<tool_call>\n{"name": "weather", "arguments": ')


def test_strict_must_be_a_boolean(engine: SpecGuardEngine) -> None:
    bad = {"type": "function", "function": {**WEATHER["function"], "strict": "yes"}}
    with pytest.raises(InputError, match="strict must be true"):
        engine.generate(QUESTION, tools=[bad])


def test_forced_arguments_follow_the_schema_where_the_pair_alone_breaks_it(
        engine: SpecGuardEngine, pair: tuple[Any, Any, Any, Any]) -> None:
    result = engine.generate(QUESTION, tools=TOOLS, tool_choice="weather")
    [call] = result.tool_calls
    assert call.name == "weather" and call.arguments["city"] in ("Paris", "Oslo")
    hetero = SpecGuardEngine(*pair, config=SpecGuardConfig(**EXACT),
                             engine_config=EngineConfig(heterogeneous=True))
    hetero.same_vocab = False  # no grammar: the forced prefix, then the target writes freely
    loose = hetero.generate(QUESTION, tools=TOOLS, tool_choice="weather")
    assert not loose.tool_calls and loose.invalid_tool_calls
    assert json.dumps(call.arguments) not in loose.steps[0].text
