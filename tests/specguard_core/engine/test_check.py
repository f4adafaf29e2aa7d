"""The target check while the draft writes (`check_tokens`, `check_run_below`, experimental
`check_below`): the same output and paths as checking each written step, fewer wasted draft
tokens, caches consistent; the plan says when it is off."""

from __future__ import annotations

import math

import pytest

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.decoding.sampling import Shaping
from specguard_core.engine.check import TargetCheck
from specguard_core.testing import scripted_engine
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair
from tests.specguard_core.engine.test_engine import GREEDY, QUESTION, all_ids, reference
from tests.specguard_core.engine.test_paths import DRAFT, SD, TARGET

CHECKED = dict(route="check", typical_eps=0.03, typical_delta=0.1, typical_ratio=0.3)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> SpecGuardEngine:
    pair = noisy_copy_pair(tmp_path_factory.mktemp("noisy"))
    return SpecGuardEngine(*pair, config=SpecGuardConfig(**GREEDY, fallback="speculative"))


def _wasted(result: object) -> int:
    return sum(s.draft_wasted for s in result.steps)  # type: ignore[attr-defined]


@pytest.mark.parametrize("every, below, run_below",
                         [(1, 0.0, 0.0), (3, 0.0, 0.0), (8, 0.0, 0.0), (64, 0.6, 0.0),
                          (64, 0.0, 0.6)])
def test_checking_as_the_draft_writes_keeps_the_output_and_wastes_less(
        engine: SpecGuardEngine, every: int, below: float, run_below: float) -> None:
    whole = engine.generate(QUESTION, **CHECKED)
    growing = engine.generate(QUESTION, check_tokens=every, check_run_below=run_below,
                              experimental={"check_below": below}, **CHECKED)
    assert all_ids(growing) == all_ids(whole)
    assert [s.path for s in growing.steps] == [s.path for s in whole.steps]
    assert [s.verified_prefix for s in growing.steps] == [s.verified_prefix for s in whole.steps]
    paths = {s.path for s in whole.steps}
    assert {"target-checked", "target-verified"} <= paths  # both outcomes exercised
    assert _wasted(growing) < _wasted(whole)
    assert growing.stats.target.tentative < whole.stats.target.tentative  # nor fed to the target
    # the check's passes are timed as target_check, not as the draft's proposal
    assert growing.stats.phase_time_s["target_check"] > 0


def test_checking_as_the_draft_writes_with_ratio_one_is_target_greedy(
        engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, check_tokens=2, **{**CHECKED, "typical_ratio": 1.0})
    assert all_ids(result) == reference(engine.target.model, engine.prompt_ids(QUESTION), 48)


def test_the_caches_hold_exactly_the_output(engine: SpecGuardEngine) -> None:
    result = engine.generate(QUESTION, check_tokens=3, **CHECKED)
    t, d, prompt = result.stats.target, result.stats.draft, result.usage.prompt_tokens
    out = len([x for s in result.steps for x in s.token_ids if x not in engine.target.eos_ids])
    held = t.prefilled + t.decoded + t.tentative - t.discarded
    assert prompt + out - 1 <= held <= prompt + out  # its own last token may still be pending
    assert d.prefilled <= prompt + result.usage.completion_tokens  # catch-ups only


def test_the_draft_stops_at_the_first_refused_token() -> None:
    engine = scripted_engine(lambda p: TARGET, lambda p: DRAFT, config=SD)
    whole = engine.generate("Go", route="check")
    growing = engine.generate("Go", route="check", check_tokens=1)
    assert growing.raw_text == whole.raw_text == TARGET
    step2 = growing.steps[1]
    assert step2.path == "target-verified"
    assert step2.verified_prefix == whole.steps[1].verified_prefix
    # stopped at the refused digit instead of writing "1.\n\n" after it
    assert step2.draft_wasted < whole.steps[1].draft_wasted


def test_other_configurations_check_the_written_step(engine: SpecGuardEngine) -> None:
    """The score route (the target may not be needed) or k > 1 (the selector needs whole steps)
    checks each written step: same output, same number of target passes, and the plan says why
    the growing check is off (with one warning, as check_tokens was asked for)."""
    for extra, why in ((dict(route="score", tau_accept=0.5, tau_reject=0.2), "route='score'"),
                       (dict(k=2), "k=2 candidates")):
        cfg = {**CHECKED, **extra}
        a = engine.generate(QUESTION, **cfg)
        with pytest.warns(UserWarning, match=f"growing check off: {why}"):
            b = engine.generate(QUESTION, check_tokens=2, **cfg)
        assert all_ids(a) == all_ids(b)
        assert a.stats.target_forward_passes == b.stats.target_forward_passes
        assert b.plan["check"] == "whole" and any(why in n for n in b.plan["notes"])
    assert engine.generate(QUESTION, check_tokens=2, **CHECKED).plan["check"] == "growing"


@pytest.fixture(scope="module")
def noisier(tmp_path_factory: pytest.TempPathFactory) -> SpecGuardEngine:
    pair = noisy_copy_pair(tmp_path_factory.mktemp("noisier"), noise=0.05)
    return SpecGuardEngine(*pair, config=SpecGuardConfig(**GREEDY, fallback="speculative"))


@pytest.mark.parametrize("prompt", ["Ünïcödé ☃ 日本語 test",
                                    "Please reason step by step about this question. " * 3])
@pytest.mark.parametrize("max_step", [3, 7])
def test_short_budgets_and_split_characters_keep_the_whole_step_verdicts(
        noisier: SpecGuardEngine, prompt: str, max_step: int) -> None:
    """A step cut by its token budget drops the tokens of an unfinished character; the check
    while writing never judges those (it sees whole characters only), so paths stay equal."""
    cfg = dict(CHECKED, typical_eps=0.1, typical_delta=0.3, typical_ratio=0.0,
               max_step_tokens=max_step, max_new_tokens=50)
    whole = noisier.generate(prompt, **cfg)
    for every, below, run_below in ((1, 0.0, 0.0), (2, 0.0, 0.0), (3, 0.0, 0.0), (64, 0.5, 0.0),
                                    (4, 0.3, 0.0), (64, 0.0, 0.5)):
        growing = noisier.generate(prompt, check_tokens=every, check_run_below=run_below,
                                   experimental={"check_below": below}, **cfg)
        assert all_ids(growing) == all_ids(whole)
        assert [s.path for s in growing.steps] == [s.path for s in whole.steps]


def test_a_finite_tau_reject_checks_the_written_step(engine: SpecGuardEngine) -> None:
    """Steps may then be rejected on their score, which needs the whole step: check_tokens is
    not used (same output, same target passes)."""
    cfg = dict(CHECKED, route="score", tau_accept=math.inf, tau_reject=0.9)
    a = engine.generate(QUESTION, **cfg)
    with pytest.warns(UserWarning, match="growing check off"):
        b = engine.generate(QUESTION, check_tokens=3, **cfg)
    assert all_ids(a) == all_ids(b)
    assert a.stats.target_forward_passes == b.stats.target_forward_passes


def test_cancelling_mid_check_leaves_the_engine_usable(engine: SpecGuardEngine,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A request cancelled while the target judges the growing step stops at its next forward;
    the next request gets exactly what it would have got anyway."""
    want = engine.generate(QUESTION, check_tokens=2, **CHECKED)
    stream = engine.stream(QUESTION, check_tokens=2, **CHECKED)
    real, calls = TargetCheck._judge, []

    def judge(self: TargetCheck, token_ids: list[int], n_fed: int) -> None:
        calls.append(len(token_ids))
        if len(calls) == 3:
            stream._cancel.set()  # as close() from another thread would, mid-check
        real(self, token_ids, n_fed)

    monkeypatch.setattr(TargetCheck, "_judge", judge)
    steps = list(stream)  # ends quietly at the cancel
    assert len(calls) == 3 and stream.cancelled and len(steps) < len(want.steps)
    monkeypatch.setattr(TargetCheck, "_judge", real)
    again = engine.generate(QUESTION, check_tokens=2, **CHECKED)
    assert all_ids(again) == all_ids(want)


def test_the_run_product_trigger_checks_sooner_as_it_rises(engine: SpecGuardEngine) -> None:
    """`check_run_below`: the higher the bound on the product of the draft's probabilities since
    the last check, the sooner the target checks, so the fewer draft tokens a refusal wastes; at
    0 it never triggers; the output never changes."""
    runs = {c: engine.generate(QUESTION, check_tokens=64, check_run_below=c, **CHECKED)
            for c in (0.0, 0.05, 0.5)}
    plain = engine.generate(QUESTION, check_tokens=64, **CHECKED)
    assert _wasted(runs[0.0]) == _wasted(plain)
    assert runs[0.0].stats.target == plain.stats.target
    assert all(all_ids(r) == all_ids(plain) for r in runs.values())
    wasted = [_wasted(runs[c]) for c in (0.0, 0.05, 0.5)]
    assert wasted[0] > wasted[1] > wasted[2]


def test_the_run_product_trigger_multiplies_the_probabilities_since_the_last_check() -> None:
    """0.9 per token: the product drops below 0.7 at the 4th token (0.9^4 = 0.66), so checks fall
    on tokens 4 and 8; a per-token bound of 0.7 (`check_below`) would never trigger."""
    for cfg, expected in ((SpecGuardConfig(check_tokens=64, check_run_below=0.7), [4, 8]),
                          (SpecGuardConfig(check_tokens=64, experimental={"check_below": 0.7}),
                           [])):
        check = TargetCheck(target=None, state=None, cfg=cfg, rule=None, shaping=Shaping(),  # type: ignore[arg-type]
                            every=64)
        judged: list[int] = []

        def judge(ids: list[int], n_fed: int, check: TargetCheck = check,
                  judged: list[int] = judged) -> None:  # every token passes
            judged.append(len(ids))
            check.checked = check.passed = len(ids)

        check._judge = judge  # type: ignore[method-assign]
        for n in range(1, 10):
            assert check(list(range(n)), [math.log(0.9)] * n) is False
        assert judged == expected
