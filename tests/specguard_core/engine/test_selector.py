"""Selection with hidden-state and sentence-transformer embeddings."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from specguard_core.decoding.proposal import Candidate
from specguard_core.engine.selector import Selector


def candidates(vectors: list[list[float]]) -> list[Candidate]:
    return [Candidate(text=f"c{i}", embedding=torch.tensor(v)) for i, v in enumerate(vectors)]


def test_hidden_selector_picks_the_soft_medoid() -> None:
    cands = candidates([[1.0, 0.0], [0.9, 0.1], [0.8, 0.2], [-1.0, 0.3]])
    assert Selector("hidden").select(cands) == 1


def test_hidden_selector_needs_embeddings() -> None:
    with pytest.raises(ValueError, match="carry no hidden-state embedding"):
        Selector("hidden").embed([Candidate(text="a"), Candidate(text="b")])


def test_candidates_that_fed_nothing() -> None:
    # every candidate ended at its first token (EOS): nothing to compare, take the first
    assert Selector("hidden").select([Candidate(token_ids=[2]), Candidate(token_ids=[2])]) == 0
    cands = [Candidate(token_ids=[2])] + candidates([[1.0, 0.0], [0.9, 0.1], [0.8, 0.2]])
    assert Selector("hidden").select(cands) == 2  # the medoid of those with hidden states


def test_sentence_transformer_selector_embeds_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeEncoder:
        def encode(self, texts: list[str], convert_to_numpy: bool) -> Any:
            table = {"a": [1.0, 0.0], "b": [0.95, 0.05], "c": [0.0, 1.0]}
            return np.array([table[t] for t in texts])

    selector = Selector("sentence-transformer", "unused-path")
    monkeypatch.setattr(Selector, "_encoder", FakeEncoder())
    cands = [Candidate(text=t) for t in "cab"]
    assert selector.select(cands) in (1, 2)  # one of the two near-identical steps, not "c"
    assert selector.embed(cands).shape == (3, 2)
