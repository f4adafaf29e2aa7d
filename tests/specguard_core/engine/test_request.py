"""`Request`'s stop handling on a scripted pair: eos, stop strings (one spanning two steps),
max_new_tokens, max_steps, a tool call without its closer."""

from __future__ import annotations

import pytest

from specguard_core import SpecGuardConfig
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.testing import scripted_engine
from tests.fixtures import WEATHER

SCRIPT = "Alpha one.\n\nBeta two.\n\nGamma three.\n\nDelta four."


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return scripted_engine(lambda prompt: SCRIPT)


def test_eos_ends_with_stop(engine: SpecGuardEngine) -> None:
    result = engine.generate("Go")
    assert result.raw_text == SCRIPT and result.finish_reason == "stop"
    assert result.steps[-1].token_ids[-1] in engine.target.eos_ids


def test_stop_string_inside_one_step(engine: SpecGuardEngine) -> None:
    result = engine.generate("Go", stop=("two",))
    assert result.finish_reason == "stop"
    assert result.raw_text == "Alpha one.\n\nBeta "
    assert len(result.steps) == 2  # stopped at the step that contains it


def test_stop_string_spanning_two_steps(engine: SpecGuardEngine) -> None:
    result = engine.generate("Go", stop=("one.\n\nBeta",))
    steps = [s.text for s in result.steps]
    assert "one.\n\nBeta" not in steps[0] and "one.\n\nBeta" not in steps[1]  # really split
    assert result.finish_reason == "stop" and len(result.steps) == 2
    assert result.raw_text == "Alpha "


def test_max_new_tokens(engine: SpecGuardEngine) -> None:
    result = engine.generate("Go", max_new_tokens=5)
    assert result.finish_reason == "length" and result.usage.completion_tokens == 5


def test_max_steps(engine: SpecGuardEngine) -> None:
    result = engine.generate("Go", max_steps=2)
    assert result.finish_reason == "max_steps" and len(result.steps) == 2
    assert result.raw_text == "Alpha one.\n\nBeta two.\n\n"


def test_tool_call_without_closer_stops() -> None:
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\nI made up a result.'
    eng = scripted_engine(lambda prompt: "Let me check.\n\n" + call,
                          config=SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=256))
    result = eng.generate("Weather?", tools=[WEATHER])
    assert result.finish_reason == "tool_calls"
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert "made up" not in result.raw_text  # nothing after the unclosed call is generated


def test_either_model_out_of_room_ends_with_length() -> None:
    """Heterogeneous pairs count tokens differently: when the draft's context is full first, the
    request stops with `length` instead of proposing empty steps past the draft's window."""
    import torch

    from specguard_core.cache.state import CacheState
    from specguard_core.engine.accept import Rules
    from specguard_core.engine.plan import PairFacts, make_plan
    from specguard_core.engine.request import Request, Step
    from specguard_core.text.steps import StepRules

    def request(draft_len: int, target_len: int) -> Request:
        cfg = SpecGuardConfig(max_new_tokens=100)
        plan = make_plan(cfg, PairFacts(True, True, 8, None, ()), Rules(None), tools=False)
        req = Request(cfg=cfg, tools=[], required=None, plan=plan,
                      rules=StepRules(), draft=CacheState(cache=None), target=CacheState(cache=None),
                      generator=torch.Generator(), prompt_tokens=5, context_window=50)
        req.draft.ids, req.target.ids = list(range(draft_len)), list(range(target_len))
        return req

    step = Step([1, 2], "Alpha one.\n\n", "draft", eos=False, n_candidates=1)
    full_draft = request(draft_len=49, target_len=20)
    assert full_draft.budget(full_draft.draft) == 0 and full_draft.budget(full_draft.target) > 0
    full_draft.commit(step, None, {}, None)
    assert full_draft.finish == "length"
    roomy = request(draft_len=20, target_len=20)
    roomy.commit(step, None, {}, None)
    assert roomy.finish is None


LONG = "\n\n".join(f"Point {i} of the plan." for i in range(90))  # > 512 tokens and > 64 steps


def test_an_unset_budget_runs_until_the_answer_ends() -> None:
    cfg = SpecGuardConfig(k=1, temperature=0.0)
    assert (cfg.max_new_tokens, cfg.max_steps) == (None, None)  # no cap but the window
    result = scripted_engine(lambda prompt: LONG, config=cfg).generate("Go")
    assert result.raw_text == LONG and result.finish_reason == "stop"
    assert result.usage.completion_tokens > 512 and len(result.steps) > 64


def test_an_unset_budget_ends_when_the_context_window_is_full() -> None:
    engine = scripted_engine(lambda prompt: LONG, config=SpecGuardConfig(k=1, temperature=0.0))
    engine.draft.context_window = engine.target.context_window = 200  # a small model's window
    result = engine.generate("Go")
    assert result.finish_reason == "length"
    used = result.usage.prompt_tokens + result.usage.completion_tokens
    assert 190 <= used < 200 and LONG.startswith(result.raw_text)
