"""Strict response formats: constrained decoding on tiny random models (float32).

A random model writes no JSON of its own, so whatever the reply holds is the grammar's doing. The
lossless claim is checked against transformers' own greedy `generate` with the same grammar
applied as a logits processor (llguidance's matcher, advanced token by token): with
`acceptance="exact"` the engine's reply is that text token for token, whichever way its steps went
(kept, checked, target-verified)."""

from __future__ import annotations

import json
import math
from typing import Any

import jsonschema
import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.decoding.answer_check import AnswerCheck
from specguard_core.decoding.grammar import Grammar
from specguard_core.text.errors import InputError
from specguard_core.text.formats import ResponseFormat
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair

PERSON = {"type": "object", "additionalProperties": False, "required": ["ok", "mood"],
          "properties": {"ok": {"type": "boolean"}, "mood": {"enum": ["calm", "glad", "odd"]}}}
STRICT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                 "strict": True}}
LOOSE = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
QUESTION = "Describe your mood as JSON."
EXACT = dict(k=1, temperature=0.0, max_new_tokens=40, max_step_tokens=8, acceptance="exact",
             action_acceptance="exact", fallback="speculative")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> SpecGuardEngine:
    pair = noisy_copy_pair(tmp_path_factory.mktemp("grammar"))
    return SpecGuardEngine(*pair, config=SpecGuardConfig(**EXACT))


class GrammarProcessor(LogitsProcessor):
    """A grammar as a transformers logits processor (the reference: one matcher, token by
    token, no rollback)."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return self.grammar.mask(scores, [input_ids[0].tolist()])


def greedy_under(model: Any, prompt: list[int], grammar: Grammar, n: int) -> list[int]:
    """`model`'s greedy reply to `prompt` under `grammar` (transformers' `generate`)."""
    out = model.generate(torch.tensor([prompt], device=model.device), max_new_tokens=n,
                         do_sample=False,
                         logits_processor=LogitsProcessorList([GrammarProcessor(grammar)]))
    return list(out[0, len(prompt):].tolist())


def constrained_greedy(model: Any, engine: SpecGuardEngine, n: int, question: str = QUESTION,
                       schema: dict[str, Any] = PERSON) -> list[int]:
    """`model`'s own greedy reply under the schema's grammar."""
    prompt = engine.prompt_ids(question)
    return greedy_under(model, prompt, engine.grammars.for_schema(schema, len(prompt)), n)


@pytest.mark.parametrize(("overrides", "writer"), [
    (dict(route="check", check_tokens=4), "target"),  # every step through the target's check
    (dict(route="score", tau=math.inf), "target"),  # every step through the fallback
    (dict(route="score", tau=-math.inf), "draft"),  # every draft step kept
])
def test_strict_reply_is_the_constrained_greedy_text(engine: SpecGuardEngine,
                                                     overrides: dict[str, Any],
                                                     writer: str) -> None:
    result = engine.generate(QUESTION, response_format=STRICT, **overrides)
    ids = [t for s in result.steps for t in s.token_ids]
    model = engine.target.model if writer == "target" else engine.draft.model  # type: ignore
    assert ids == constrained_greedy(model, engine, 40)[: len(ids)]
    assert len(ids) >= 10
    if result.finish_reason == "stop":
        jsonschema.validate(json.loads(result.text), PERSON)
    if writer == "target" and overrides["route"] == "check":
        assert {s.path for s in result.steps} & {"target-checked", "target-verified"}


def test_strict_reply_parses_and_matches_the_schema(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, response_format=STRICT, max_new_tokens=60)
    assert result.finish_reason == "stop", result.text
    jsonschema.validate(json.loads(result.text), PERSON)
    unconstrained = engine.generate(QUESTION, max_new_tokens=60)
    with pytest.raises(ValueError):  # the random pair on its own writes no JSON at all
        json.loads(unconstrained.text)


@pytest.mark.parametrize("fmt", [LOOSE, PERSON, {"type": "json_object"}, "json"])
def test_every_json_format_is_constrained_by_default(engine: SpecGuardEngine, fmt: Any) -> None:
    result = engine.generate(QUESTION, response_format=fmt, max_new_tokens=80)
    if fmt in ({"type": "json_object"}, "json"):  # any object: this random pair's runs long
        assert AnswerCheck(ResponseFormat())(result.text, result.finish_reason == "stop") is None
        assert result.text.startswith("{") and len(result.text) > 20
        return
    assert result.finish_reason == "stop", result.text
    jsonschema.validate(json.loads(result.text), PERSON)


def test_the_check_only_path_is_the_opt_out(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, response_format=LOOSE, response_format_mode="check")
    assert not _is_json(result.text)  # checked, not constrained: the random pair writes no JSON
    strict = engine.generate(QUESTION, response_format=STRICT, response_format_mode="check",
                             max_new_tokens=60)
    jsonschema.validate(json.loads(strict.text), PERSON)  # strict: constrained in either mode


def test_a_constrained_format_with_tools_answers_or_calls(engine: SpecGuardEngine) -> None:
    """One grammar holds both: the reply is the format's JSON, or calls of the offered tools."""
    tool = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"n": {"enum": [1, 2]}}, "required": ["n"],
        "additionalProperties": False}}}
    for fmt in (STRICT, LOOSE):
        result = engine.generate(QUESTION, response_format=fmt, tools=[tool], max_new_tokens=80,
                                 max_step_tokens=64)
        if result.tool_calls or result.invalid_tool_calls:
            assert result.text == "" and [c.name for c in result.tool_calls] == ["f"]
        else:
            jsonschema.validate(json.loads(result.text), PERSON)
    forced = engine.generate(QUESTION, response_format=STRICT, tools=[tool], tool_choice="f",
                             max_new_tokens=80, max_step_tokens=64)
    assert [c.name for c in forced.tool_calls] == ["f"] and forced.text == ""


def test_strict_flag_must_be_a_boolean(engine: SpecGuardEngine) -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON, "strict": "yes"}}
    with pytest.raises(InputError, match="strict must be true or false"):
        engine.generate(QUESTION, response_format=bad)


def test_masks_follow_any_sequence_and_refuse_a_broken_one(engine: SpecGuardEngine) -> None:
    tok = engine.tokenizer
    grammar = engine.grammars.for_schema(PERSON, 0)
    text = '{"ok": true, "mood": "calm"}'
    ids = tok.encode(text, add_special_tokens=False)
    for i, t in enumerate(ids):  # forward, then back and forward again: rollback by sequence
        mask = grammar.allowed(ids[:i])
        assert mask is not None and bool(mask[t])
    assert grammar.allowed(ids[:2]) is not None
    end = grammar.allowed(ids)
    assert end is not None and set(end.nonzero()[:, 0].tolist()) <= set(engine.target.eos_ids)
    assert grammar.allowed(tok.encode("```json", add_special_tokens=False)) is None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
