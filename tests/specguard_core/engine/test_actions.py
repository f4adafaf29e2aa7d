"""Actions are the target's own: a tool call and the turn's first step (call or answer) are kept
only as the target writes them; prose is judged as before."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from specguard_core import SpecGuardConfig, SpecGuardEngine, preset
from specguard_core.testing import ScriptedLM, build_tokenizer
from tests.fixtures import WEATHER
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair
from tests.specguard_core.engine.test_engine import reference

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWERED = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]


def unsure_target_engine(target: Any, draft: Any, **config: Any) -> SpecGuardEngine:
    """A target whose top token leads every other by a margin of 1 only (each other token gets
    e^-1 = 0.37 of its probability), so the typical check (ratio 0.3) passes whatever the draft
    writes: only the exact rule tells the target's own text apart."""
    tok = build_tokenizer(tempfile.mkdtemp(prefix="specguard-tok-"))
    draft_lm = ScriptedLM(tok, draft, 12.0, name="scripted-draft")
    target_lm = ScriptedLM(tok, target, 1.0, layers=4, name="scripted-target")
    return SpecGuardEngine(draft_lm, tok, target_lm, tok,
                           config=preset("balanced", max_new_tokens=96, **config))


def answers(prompt: str) -> str:
    return "It is sunny in Paris." if "<tool_response>" in prompt else CALL


def repeats_the_call(prompt: str) -> str:
    return CALL


def test_a_draft_that_repeats_an_answered_call_gets_the_target_s_answer() -> None:
    engine = unsure_target_engine(answers, repeats_the_call)
    result = engine.generate(ANSWERED, tools=[WEATHER])
    assert result.tool_calls == [] and result.finish_reason == "stop"
    assert result.text == "It is sunny in Paris."
    assert result.steps[0].acceptance == "exact"
    assert result.steps[0].path == "target-verified"


def test_typical_actions_let_the_draft_act_as_it_likes() -> None:
    engine = unsure_target_engine(answers, repeats_the_call, acceptance="typical",
                                  action_acceptance="typical")
    result = engine.generate(ANSWERED, tools=[WEATHER])
    assert [c.name for c in result.tool_calls] == ["get_weather"]  # the drift the default prevents
    assert result.steps[0].acceptance == "typical"


def test_a_call_begun_mid_turn_is_judged_exactly() -> None:
    def target(prompt: str) -> str:
        return 'I will look it up.\n\n<tool_call>\n{"name": "get_weather", "arguments": ' \
               '{"city": "Rome"}}\n</tool_call>'

    def draft(prompt: str) -> str:
        return "I will look it up.\n\n" + CALL

    result = unsure_target_engine(target, draft).generate("Weather in Rome?", tools=[WEATHER])
    assert [c.arguments for c in result.tool_calls] == [{"city": "Rome"}]
    assert [s.acceptance for s in result.steps[:2]] == ["exact", "exact"]  # then its EOS step


def test_prose_without_tools_follows_the_acceptance_rule() -> None:
    def target(prompt: str) -> str:
        return "First, 3 plus 4 is 7.\n\nThe answer is 7."

    def draft(prompt: str) -> str:
        return "First, 3 plus 4 is 8.\n\nThe answer is 8."

    lossless = unsure_target_engine(target, draft).generate("What is 3 + 4?")  # the preset: exact
    assert lossless.text == "First, 3 plus 4 is 7.\n\nThe answer is 7."
    assert {s.acceptance for s in lossless.steps} == {"exact"}
    result = unsure_target_engine(target, draft, acceptance="typical").generate("What is 3 + 4?")
    assert result.text == "First, 3 plus 4 is 8.\n\nThe answer is 8."  # typical keeps the drift
    assert {s.acceptance for s in result.steps} == {"typical"}
    numbers = unsure_target_engine(target, draft, acceptance="exact-numbers")
    assert numbers.generate("What is 3 + 4?").text == "First, 3 plus 4 is 7.\n\nThe answer is 7."


@pytest.mark.parametrize(("tau", "rule", "text"), [
    (-float("inf"), "typical", "First, 3 plus 4 is 8.\n\nThe answer is 8."),  # every step vouched
    (float("inf"), "exact", "First, 3 plus 4 is 7.\n\nThe answer is 7."),  # none
])
def test_vouched_relaxes_only_the_steps_the_verifier_vouches_for(tau: float, rule: str,
                                                                   text: str) -> None:
    def target(prompt: str) -> str:
        return "First, 3 plus 4 is 7.\n\nThe answer is 7."

    def draft(prompt: str) -> str:
        return "First, 3 plus 4 is 8.\n\nThe answer is 8."

    engine = unsure_target_engine(target, draft, acceptance="vouched", tau=tau, route="check")
    result = engine.generate("What is 3 + 4?")
    assert result.text == text
    assert {s.acceptance for s in result.steps} == {rule}  # the rule the step's score chose
    assert all(s.score is not None for s in result.steps if s.source == "draft")


@pytest.mark.parametrize("route", ["check", "score"])
def test_the_first_step_with_tools_is_the_target_s_greedy_text(tmp_path: Path, route: str) -> None:
    """Float32 tiny random pair (the draft a noisy copy of the target): with tools offered, the
    turn's first step (where the model chooses between calling and answering) is the target's
    greedy text token for token, on both routes."""
    keep_all = dict(tau=-float("inf")) if route == "score" else {}  # the score route: keep all
    cfg = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=24, max_step_tokens=12,
                          fallback="speculative", route=route, typical_eps=0.0,
                          typical_delta=0.0, **keep_all)  # typical would pass every token
    engine = SpecGuardEngine(*noisy_copy_pair(tmp_path, noise=0.3), config=cfg)
    prompt = engine.prompt_ids("What is the weather in Paris?", tools=[WEATHER])
    want = reference(engine.target.model, prompt, 24)
    result = engine.generate("What is the weather in Paris?", tools=[WEATHER])
    first = result.steps[0]
    assert first.acceptance == "exact"
    assert first.token_ids == want[: len(first.token_ids)]
    drifted = engine.generate("What is the weather in Paris?", tools=[WEATHER],
                              action_acceptance="typical")
    assert drifted.steps[0].acceptance == ("typical" if route == "check" else None)  # score: kept
    assert drifted.steps[0].token_ids != want[: len(drifted.steps[0].token_ids)]  # the draft's
