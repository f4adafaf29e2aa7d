"""A strict response format on the default real pair, float32 (opt-in: SPECGUARD_REAL_MODELS=1
with the pair cached): `balanced`'s constrained reply is the target's own constrained greedy reply
token for token, and it parses into the schema."""

from __future__ import annotations

import json

import jsonschema

from tests.fixtures import needs_real, real_engine
from tests.specguard_core.decoding.test_grammar import constrained_greedy

pytestmark = needs_real
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "born", "field"],
          "properties": {"name": {"type": "string"}, "born": {"type": "integer"},
                         "field": {"type": "string"}}}
QUESTION = "Who was Ada Lovelace? Answer with her name, birth year and field."


def test_balanced_strict_reply_is_the_targets_constrained_greedy_reply() -> None:
    engine = real_engine("float32", "balanced")
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                  "strict": True}}
    result = engine.generate(QUESTION, response_format=fmt, max_new_tokens=64)
    assert result.finish_reason == "stop", result.text
    jsonschema.validate(json.loads(result.text), PERSON)
    ids = [t for s in result.steps for t in s.token_ids]
    reference = constrained_greedy(engine.target.model, engine, 64, QUESTION, PERSON)  # type: ignore[attr-defined]
    assert ids == reference[: len(ids)]
    assert any(s.source == "draft" or s.draft_written for s in result.steps)  # the draft helped
