"""A request's plan (`engine/plan.py`): decided once when it opens, recorded on the result, what is
off said in its notes, with one warning when the config asked for it."""

from __future__ import annotations

import warnings

import pytest

from specguard_core.config import preset
from specguard_core.testing import scripted_engine

REPLY = "First, 3 + 4 = 7.\n\nSo the answer is 7."


def test_the_default_plan_is_recorded_on_the_result() -> None:
    result = scripted_engine(lambda prompt: REPLY, config=preset("balanced")).generate("What is 3 + 4?")
    assert result.plan == {
        "route": "check", "check": "growing", "check_every": 16, "fallback": "speculative",
        "guesses": 8, "guess_proposals": True, "scoring": "draft", "grounding": False,
        "step_rule": "exact", "action_rule": "exact", "notes": []}


def test_what_cannot_run_is_a_note_and_one_warning_when_asked_for() -> None:
    engine = scripted_engine(lambda prompt: REPLY, config=preset("balanced"))
    with pytest.warns(UserWarning, match="growing check off: acceptance='exact' passes no token"):
        sampled = engine.generate("What is 3 + 4?", temperature=0.7, check_tokens=8)
    assert sampled.plan["check"] == "whole"
    assert any("passes no token when sampling" in n for n in sampled.plan["notes"])
    with warnings.catch_warnings():  # nothing asked for is off: no warning
        warnings.simplefilter("error", UserWarning)
        typical = engine.generate("What is 3 + 4?", temperature=0.7, acceptance="typical")
    assert typical.plan["check"] == "growing" and typical.plan["step_rule"] == "typical"


def test_the_paper_preset_plans_a_two_way_rule_without_guesses() -> None:
    result = scripted_engine(lambda prompt: REPLY, config=preset("paper")).generate("What is 3 + 4?")
    plan = result.plan
    assert (plan["route"], plan["check"], plan["fallback"], plan["grounding"]) == \
        ("score", "none", "sample", True)
    assert not plan["guess_proposals"]
    assert any("guesses off in step proposals: k=16" in n for n in plan["notes"])
