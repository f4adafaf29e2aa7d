"""A named tool call on the default real pair, float32 (opt-in: SPECGUARD_REAL_MODELS=1 with the
pair cached): `balanced`'s constrained call is the target's own constrained greedy call token for
token, and its arguments follow the tool's schema."""

from __future__ import annotations

import jsonschema

from tests.fixtures import needs_real, real_engine
from tests.specguard_core.decoding.test_tool_grammar import constrained_greedy

pytestmark = needs_real
CONVERT = {"type": "function", "function": {
    "name": "convert", "description": "Convert an amount between currencies.",
    "parameters": {"type": "object", "additionalProperties": False,
                   "required": ["amount", "source", "target"],
                   "properties": {"amount": {"type": "number"},
                                  "source": {"enum": ["EUR", "USD", "GBP"]},
                                  "target": {"enum": ["EUR", "USD", "GBP"]}}}}}
QUESTION = "How many dollars is 250 euros?"


def test_balanced_named_call_is_the_targets_constrained_greedy_call() -> None:
    engine = real_engine("float32", "balanced")
    result = engine.generate(QUESTION, tools=[CONVERT], tool_choice="convert", max_new_tokens=64)
    assert result.finish_reason == "tool_calls", result.steps
    [call] = result.tool_calls
    jsonschema.validate(call.arguments, CONVERT["function"]["parameters"])
    ids = [t for s in result.steps for t in s.token_ids]
    reference = constrained_greedy(engine.target.model, engine, "convert", 64,  # type: ignore[attr-defined]
                                   QUESTION, [CONVERT])
    assert ids == reference[: len(ids)]
    assert any(s.draft_written for s in result.steps)  # the draft helped
    print(call.arguments, [(s.path, s.draft_written) for s in result.steps])
