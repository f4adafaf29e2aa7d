"""`Judge`: what the proposal captures for the verifier, the target's pass, vocabulary conversion."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from specguard_core.config import SpecGuardConfig
from specguard_core.engine.judge import Judge
from specguard_core.testing import scripted_engine

REPLY = "First, add 3 and 4 to get 7.\n\nThe answer is 42."


@pytest.fixture(scope="module")
def judge() -> Judge:
    return scripted_engine(lambda _: REPLY).judge


def test_auto_resolves_to_the_paper_verifier_when_no_card_matches_the_scoring_model(
        judge: Judge) -> None:
    cfg = judge.resolve_verifier(SpecGuardConfig(verifier="auto"))
    assert cfg.verifier == "paper"
    assert judge.resolve_verifier(SpecGuardConfig(verifier="paper")).verifier == "paper"


def test_grounding_is_captured_only_when_the_paper_ensemble_weighs_it(judge: Judge) -> None:
    layers = judge.capture_layers(judge.draft, SpecGuardConfig(
        verifier="paper", beta=0.5, experimental={"grounding_layers": 2}))
    assert layers is not None and len(layers) == 2
    assert judge.capture_layers(judge.draft, SpecGuardConfig(verifier="paper", beta=1.0)) is None
    assert judge.pool_layers(judge.draft, SpecGuardConfig(verifier="paper")) == ()


def test_convert_passes_ids_through_a_shared_vocabulary_and_text_otherwise(judge: Judge) -> None:
    ids = judge.draft.encode("add 3 and 4")
    assert judge.convert(ids, judge.draft, judge.target) == ids

    class Shifted:  # another vocabulary: every id one higher
        def encode(self, text: str) -> list[int]:
            return [i + 1 for i in judge.draft.encode(text)]

        def decode(self, ids: list[int]) -> str:
            return str(judge.draft.decode([i - 1 for i in ids]))

    other: Any = Shifted()
    hetero = Judge(judge.draft, judge.target, same_vocab=False)
    assert hetero.convert(ids, judge.draft, other) == [i + 1 for i in ids]
    assert hetero.convert([i + 1 for i in ids], other, judge.draft) == ids


def test_checked_tokens_are_the_draft_tokens_or_their_target_encoding(judge: Judge) -> None:
    cand: Any = SimpleNamespace(token_ids=[1, 2, 3], n_fed=2, fed=[1, 2])
    assert judge.checked_tokens(cand) == ([1, 2, 3], 2)  # a final EOS is judged, not fed
    hetero = Judge(judge.draft, judge.target, same_vocab=False)
    ids = judge.target.encode(judge.draft.decode([1, 2]))
    assert hetero.checked_tokens(cand) == (ids, len(ids))
