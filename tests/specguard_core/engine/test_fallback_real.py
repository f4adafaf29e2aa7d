"""The speculative fallback on the default real pair, float32 (opt-in: SPECGUARD_REAL_MODELS=1 with
the pair cached; `specguard models fetch`). With tau=+inf and greedy settings the output must equal
the target's own greedy output token for token."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.models.registry import resolve

pytestmark = pytest.mark.real
QUESTION = "Natalia sold 48 clips in April and half as many in May. How many in total? Reason step by step."


def _real_paths() -> tuple[str, str]:
    if os.environ.get("SPECGUARD_REAL_MODELS") != "1":
        pytest.skip("real-model tests are opt-in: set SPECGUARD_REAL_MODELS=1")
    draft, target = resolve("qwen0.5b"), resolve("qwen1.5b")
    if not (Path(draft).exists() and Path(target).exists()):
        pytest.skip("the default pair is not cached; run `specguard models fetch`")
    return draft, target


def test_speculative_fallback_equals_target_greedy_on_the_real_pair() -> None:
    draft, target = _real_paths()
    engine = SpecGuardEngine.from_pretrained(
        draft, target, device="cpu", dtype="float32", progress=False,
        config=SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=64, fallback="speculative"))
    result = engine.generate(QUESTION, tau=math.inf)
    prompt = engine.prompt_ids(QUESTION)
    ref = engine.target.model.generate(torch.tensor([prompt]), max_new_tokens=64, do_sample=False)
    assert [t for s in result.steps for t in s.token_ids] == ref[0, len(prompt):].tolist()
    s = result.stats
    assert s.tokens_per_target_forward is not None and s.tokens_per_target_forward > 1.5


def test_the_balanced_check_while_writing_keeps_the_whole_step_verdicts_on_the_real_pair() -> None:
    """float32: checking 16 tokens at a time (the preset) gives the whole-step check's text, and
    with typical_ratio=1 both are the target's greedy text."""
    from specguard_core.config import preset

    draft, target = _real_paths()
    engine = SpecGuardEngine.from_pretrained(draft, target, device="cpu", dtype="float32",
                                             progress=False, config=preset("balanced",
                                                                           max_new_tokens=64))
    growing = engine.generate(QUESTION)
    whole = engine.generate(QUESTION, check_tokens=0)
    assert growing.raw_text == whole.raw_text
    assert [s.path for s in growing.steps] == [s.path for s in whole.steps]
    assert sum(s.draft_wasted for s in growing.steps) <= sum(s.draft_wasted for s in whole.steps)
    lossless = engine.generate(QUESTION, typical_ratio=1.0)
    prompt = engine.prompt_ids(QUESTION)
    ref = engine.target.model.generate(torch.tensor([prompt]), max_new_tokens=64, do_sample=False)
    assert [t for s in lossless.steps for t in s.token_ids] == ref[0, len(prompt):].tolist()


def test_balanced_with_draft_guesses_writes_the_target_greedy_text_on_the_real_pair() -> None:
    """float32: the draft's prompt-lookup guesses (on in every preset) leave `balanced`'s text the
    target's greedy text, in fewer draft forwards than without them."""
    from specguard_core.config import preset

    draft, target = _real_paths()
    engine = SpecGuardEngine.from_pretrained(draft, target, device="cpu", dtype="float32",
                                             progress=False, config=preset("balanced",
                                                                           max_new_tokens=96))
    guessed, plain = engine.generate(QUESTION), engine.generate(QUESTION, draft_lookahead=0)
    prompt = engine.prompt_ids(QUESTION)
    ref = engine.target.model.generate(torch.tensor([prompt]), max_new_tokens=96, do_sample=False)
    target_ids = ref[0, len(prompt):].tolist()
    assert [t for s in guessed.steps for t in s.token_ids] == target_ids
    assert [t for s in plain.steps for t in s.token_ids] == target_ids
    assert guessed.stats.draft.forward_calls < plain.stats.draft.forward_calls
