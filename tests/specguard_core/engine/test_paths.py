"""The three-way decision on a scripted pair: each path taken and recorded (kept, target-checked,
target-verified), tool calls always checked, and multi-byte characters never split by a step."""

from __future__ import annotations

import math

from specguard_core import SpecGuardConfig
from specguard_core.testing import scripted_engine
from tests.fixtures import WEATHER

TARGET = "First, 3 + 4 = 7.\n\nThen 7 * 6 = 42.\n\nThe answer is 42."
DRAFT = "First, 3 + 4 = 7.\n\nThen 7 * 6 = 41.\n\nThe answer is 41."  # wrong in step 2
SD = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=256, fallback="speculative")


def test_each_path_is_taken_and_recorded() -> None:
    engine = scripted_engine(lambda p: TARGET, lambda p: DRAFT, config=SD)
    kept = engine.generate("Go", tau=-math.inf)
    assert [s.path for s in kept.steps] == ["kept"] * 3 and kept.raw_text == DRAFT
    assert kept.stats.steps_kept == 3 and kept.stats.target.forward_calls == 0
    # every step checked: step 1 agrees (kept after one target pass), step 2 fails the check and
    # the target keeps its verified prefix, then writes the rest
    checked = engine.generate("Go", route="check")
    assert checked.raw_text == TARGET
    paths = [s.path for s in checked.steps]
    assert paths[0] == "target-checked" and paths[1] == "target-verified"
    step2 = checked.steps[1]
    assert step2.verified_prefix == len(engine.target.encode("Then 7 * 6 = 4"))
    assert step2.draft_written >= step2.verified_prefix and step2.target_written >= 1
    assert step2.target_passes >= 1 and step2.draft_wasted >= 1
    trace = step2.trace()
    assert trace["path"] == "target-verified" and trace["verified_prefix"] == step2.verified_prefix
    s = checked.stats
    assert s.steps_target_checked >= 1 and s.steps_target_verified >= 1
    assert s.steps_accepted == s.steps_kept + s.steps_target_checked
    # the old fallback still regenerates
    regen = engine.generate("Go", tau=math.inf, fallback="greedy")
    assert {s.path for s in regen.steps} == {"regenerated"} and regen.raw_text == TARGET


def test_tau_alone_is_the_two_way_rule() -> None:
    cfg = SpecGuardConfig(tau_accept=0.9, tau_reject=0.2).merged(tau=0.5)
    assert cfg.thresholds == (0.5, 0.5)
    assert SpecGuardConfig(tau=0.4).thresholds == (0.4, 0.4)


def test_draft_tool_calls_are_always_checked() -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    engine = scripted_engine(lambda p: "It is sunny." if "<tool_response>" in p else call,
                             config=SD)
    result = engine.generate("Weather?", tools=[WEATHER], tau=-math.inf)
    step = result.steps[0]
    assert step.kind == "tool_call" and step.path == "target-checked"
    assert result.stats.target.forward_calls == 1  # one pass over the call
    repeat = scripted_engine(  # the draft repeats the call after its result; the target answers
        lambda p: "It is sunny." if "<tool_response>" in p else call, lambda p: call, config=SD)
    history = [{"role": "user", "content": "Weather?"},
               {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    again = repeat.generate(history, tools=[WEATHER], tau=-math.inf)
    assert again.text == "It is sunny." and again.tool_calls == []


def test_multibyte_characters_are_never_split_by_a_step() -> None:
    text = "数学很有趣。\n\n答案是四十二。"
    for fallback in ("greedy", "speculative"):
        engine = scripted_engine(lambda p: text, config=SpecGuardConfig(
            k=1, temperature=0.0, max_step_tokens=4, max_new_tokens=256, fallback=fallback))
        for tau in (-math.inf, math.inf):
            result = engine.generate("Go", tau=tau)
            assert result.raw_text == text
            assert all("\ufffd" not in s.text for s in result.steps)
            assert len(result.steps) > 6  # the 4-token budget cut steps (3 byte tokens a character)


def test_a_character_longer_than_the_step_budget_is_one_whole_step() -> None:
    """max_step_tokens=1 and a 4-byte emoji (4 byte-level tokens): the step that starts the emoji
    goes on until it is whole, whoever writes it; every other step stays one token."""
    text = "ab🙂c🙂"
    for fallback in ("greedy", "speculative"):
        engine = scripted_engine(lambda p: text, config=SpecGuardConfig(
            k=1, temperature=0.0, max_step_tokens=1, max_new_tokens=64, fallback=fallback))
        assert len(engine.target.encode("🙂")) == 4  # no merges for it in the test tokenizer
        for tau in (-math.inf, math.inf):  # the draft's steps kept, or the target's written
            result = engine.generate("Go", tau=tau)
            assert result.raw_text == text
            *steps, end = result.steps  # the last step is the end of turn alone
            assert end.text == "" and set(end.token_ids) <= engine.target.eos_ids
            assert [s.text for s in steps] == ["a", "b", "🙂", "c", "🙂"]
            assert [len(s.token_ids) for s in steps] == [1, 1, 4, 1, 4]


def test_the_grace_for_a_whole_character_never_passes_max_new_tokens() -> None:
    engine = scripted_engine(lambda p: "a🙂", config=SpecGuardConfig(
        k=1, temperature=0.0, max_step_tokens=1, max_new_tokens=3))
    result = engine.generate("Go", tau=-math.inf)
    assert result.finish_reason == "length"
    assert sum(len(s.token_ids) for s in result.steps) == 3
    assert all(s.text for s in result.steps)  # the cut character's bytes read as U+FFFD
