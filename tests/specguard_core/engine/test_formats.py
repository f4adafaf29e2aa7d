"""Response formats and structured outputs through the engine, on scripted models that talk before
they answer: every JSON format is constrained by default (the answer is the JSON, whatever the
models would write first), the check-only path is the opt-out, vLLM's structured outputs
constrain the answer, and a format beside tools lets the reply call a tool instead."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specguard_core import SpecGuardConfig, testing
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.testing import QWEN_STYLE_TEMPLATE, scripted_engine
from specguard_core.text.errors import InputError
from specguard_core.text.formats import ResponseFormat

TRIP = '{"city": "Paris", "days": 2}'
PROSE = "Let me think about the trip.\n\nParis, for 2 days.\n\nAs JSON: " + TRIP
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city", "days"], "additionalProperties": False}
CALL = '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CFG = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=200)


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return scripted_engine(lambda prompt: PROSE, config=CFG)


FORMATS = {
    "json_object": {"type": "json_object"}, "json": "json", "bare schema": SCHEMA,
    "json_schema": {"type": "json_schema", "json_schema": {"name": "trip", "schema": SCHEMA}},
    "strict": {"type": "json_schema", "json_schema": {"name": "trip", "schema": SCHEMA,
                                                      "strict": True}},
}


@pytest.mark.parametrize("name", FORMATS)
def test_every_json_format_is_the_json_alone(engine: SpecGuardEngine, name: str) -> None:
    result = engine.generate("Plan a trip.", response_format=FORMATS[name])
    assert result.finish_reason == "stop"
    assert json.loads(result.text) == {"city": "Paris", "days": 2}
    checked = engine.generate("Plan a trip.", response_format=FORMATS[name],
                              response_format_mode="check")
    if name == "strict":  # constrained on the check-only path too
        assert checked.text == result.text
    else:  # checked: the pair's own answer, and the draft's steps were refused on the way
        assert checked.text == PROSE
        assert "breaks it at 'Let me think" in (checked.steps[0].rejected_reason or "")


def test_the_answer_streams_as_the_json(engine: SpecGuardEngine) -> None:
    steps = list(engine.stream("Plan a trip.", response_format="json"))
    assert json.loads("".join(s.text for s in steps)) == {"city": "Paris", "days": 2}


@pytest.mark.parametrize(("structured", "allowed"), [
    ({"choice": ["Rome", "Paris"]}, {"Rome", "Paris"}),
    ({"regex": "Paris, for \\d days\\."}, {"Paris, for 2 days."}),
    ({"json": SCHEMA}, {TRIP}),
    ({"json_object": True}, {TRIP}),
    ({"grammar": 'root ::= "Paris" | "Oslo"'}, {"Paris", "Oslo"}),
])
def test_structured_outputs_constrain_the_answer(engine: SpecGuardEngine,
                                                 structured: dict[str, Any],
                                                 allowed: set[str]) -> None:
    for mode in ("constrain", "check"):  # constrained under either mode
        result = engine.generate("Where to?", structured_outputs=structured,
                                 response_format_mode=mode)
        assert result.text in allowed and result.finish_reason == "stop"


def test_a_format_beside_tools_lets_the_reply_call() -> None:
    """One grammar: the format's JSON or a call; a model that calls gets its call."""
    caller = scripted_engine(lambda p: CALL if "<tools>" in p else PROSE, config=CFG)
    result = caller.generate("Weather?", tools=[WEATHER], response_format="json")
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("weather", {"city": "Paris"})]
    assert result.finish_reason == "tool_calls" and result.text == ""
    answerer = scripted_engine(lambda p: TRIP + "\n\nThat is the plan.", config=CFG)
    answer = answerer.generate("Weather?", tools=[WEATHER], response_format="json")
    assert answer.text == TRIP and not answer.tool_calls  # the object, then nothing


def test_a_thinking_model_thinks_before_the_json() -> None:
    thinker = scripted_engine(
        lambda p: "<think>Paris is nice.\n\nTwo days.</think>\n\n" + TRIP + "\n\nEnjoy!",
        config=CFG)
    thinker.target.tokenizer.chat_template += "{# <think> #}"  # a thinking template
    result = thinker.generate("Plan a trip.", response_format="json")
    assert result.reasoning == "Paris is nice.\n\nTwo days."
    assert result.text == TRIP  # the object, then nothing


def test_where_the_grammar_cannot_hold_the_error_says_what_to_do() -> None:
    hetero = scripted_engine(lambda p: PROSE, config=CFG)
    hetero.same_vocab = False  # a shared tokenizer, but treated as a heterogeneous pair
    with pytest.raises(InputError, match="in-process target sharing the draft's vocabulary; "
                                         "set response_format_mode='check'"):
        hetero.generate("Plan.", response_format="json")
    with pytest.raises(InputError, match="drop 'strict'"):
        hetero.generate("Plan.", response_format=FORMATS["strict"])
    with pytest.raises(InputError, match="structured_outputs.regex is enforced"):
        hetero.generate("Plan.", structured_outputs={"regex": "a+"})
    checked = hetero.generate("Plan.", response_format="json", response_format_mode="check")
    assert checked.text == PROSE  # the opt-out runs: checked, no guarantee


def test_tools_beside_a_format_need_the_templates_call_markers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A template that writes no `<tool_call>` blocks: no grammar can say where a call goes."""
    monkeypatch.setattr(testing, "SPECIALS", [t for t in testing.SPECIALS if "tool_call" not in t])
    engine = scripted_engine(lambda p: PROSE, config=CFG)
    engine.target.tokenizer.chat_template = QWEN_STYLE_TEMPLATE.replace(
        "<tool_call>", "[call]").replace("</tool_call>", "[/call]")
    with pytest.raises(InputError, match="no tool-call markers"):
        engine.generate("Plan.", tools=[WEATHER], response_format="json")
    assert json.loads(engine.generate("Plan.", response_format="json").text) == \
        {"city": "Paris", "days": 2}  # without tools the format holds


@pytest.mark.parametrize(("kwargs", "why"), [
    ({"response_format": "json", "structured_outputs": {"regex": "a"}}, "pass one of them"),
    ({"structured_outputs": {"regex": "(?=a)a"}}, "structured_outputs.regex cannot be enforced"),
    ({"structured_outputs": {"grammar": "root ::= ("}}, "structured_outputs"),
    ({"response_format": {"type": "object", "properties": {"a": {"pattern": "(?=a)a"}}}},
     "(?s)response_format cannot be enforced.*response_format_mode='check'"),
])
def test_bad_formats_are_input_errors(engine: SpecGuardEngine, kwargs: dict[str, Any],
                                      why: str) -> None:
    with pytest.raises(InputError, match=why):
        engine.generate("Plan.", **kwargs)


def test_a_response_format_object_passes_as_is(engine: SpecGuardEngine) -> None:
    fmt = ResponseFormat.structured({"choice": ["Paris"]})
    assert engine.generate("Where?", response_format=fmt).text == "Paris"
