"""verifier-train: a probe on separable synthetic features reaches AUROC ~1 under grouped CV and
round-trips through its card (the engine's `Probe` gives scikit-learn's probabilities)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from specguard_bench.verifier.features import FeatureTable, scalar_names
from specguard_bench.verifier.train import (
    ATTENTION_FREE_SCALARS,
    RUNTIME_SCALARS,
    Candidate,
    _model,
    choose,
    cross_validate,
    design,
    fit_card,
    search,
    threshold_for_precision,
)
from specguard_core.engine.verify.cards import Probe, VerifierCard

D = 8


def synthetic(n: int = 300, seed: int = 0) -> FeatureTable:
    """Hidden layer 4 separates the labels along one direction; layer 0 is noise."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.7).astype(int)
    direction = rng.normal(size=D)
    sep = rng.normal(size=(n, D)) * 0.3 + np.where(y[:, None] == 1, 1.0, -1.0) * direction
    noise = rng.normal(size=(n, D))
    names = scalar_names(3)
    scalars = rng.normal(size=(n, len(names))).astype(np.float32)
    scalars[:, names.index("n_tokens")] = rng.integers(5, 60, n)
    meta = {"fingerprint": {"name": "synthetic", "config_sha256": "0" * 64, "vocab_size": 10,
                            "hidden_size": D, "num_layers": 4},
            "data": "synthetic", "pool_layers": [0, 4], "scalar_names": names}
    hidden = {("mean", 0): noise.astype(np.float16), ("mean", 4): sep.astype(np.float16),
              ("last", 0): noise.astype(np.float16), ("last", 4): noise.astype(np.float16)}
    groups = np.asarray([f"p{i // 2}" for i in range(n)])  # two solutions per problem
    return FeatureTable(meta, scalars, y, groups, np.asarray(["gsm8k"] * n),
                        np.asarray([f"s{i}" for i in range(n)]), hidden)


def test_probe_on_separable_features_gets_auroc_one_and_round_trips(tmp_path: Path) -> None:
    table = synthetic()
    tried = search(table, log=lambda _: None)
    best = choose(tried)
    assert best["candidate"].layers == (4,) or 4 in best["candidate"].layers
    assert best["auroc"] > 0.99
    noise = next(r for r in tried if r["candidate"] == Candidate("mean", (0,)))
    assert noise["auroc"] < 0.75  # the noise layer is not mistaken for signal
    card = fit_card(table, best, precision=0.95)
    path = tmp_path / "card.json"
    card.save(path)
    loaded = VerifierCard.load(path)
    assert loaded == card and loaded.hidden_layers() == best["candidate"].layers
    model = _model(best["candidate"].C).fit(design(table, best["candidate"]), table.labels)
    want = model.predict_proba(design(table, best["candidate"]))[:, 1]
    probe = Probe(loaded)
    names = table.meta["scalar_names"]
    for i in range(0, 300, 37):
        pooled = {layer: torch.tensor(table.hidden[("mean", layer)][i], dtype=torch.float32)
                  for layer in loaded.hidden_layers()}
        scalars = dict(zip(names, table.scalars[i].tolist(), strict=True))
        # the card stores float16-cached inputs' statistics; float32 vs float64 rounding only
        assert probe.score(pooled, scalars) == pytest.approx(want[i], abs=1e-4)
    assert loaded.threshold is not None and 0 < loaded.threshold < 1


def test_cross_validation_is_grouped_by_problem() -> None:
    # each problem's two solutions share a label and a unique feature: memorising the problem
    # would score perfectly if a problem could sit in both train and test folds
    n = 200
    rng = np.random.default_rng(1)
    y = np.repeat(rng.integers(0, 2, n // 2), 2)
    x = np.repeat(rng.normal(size=(n // 2, 50)), 2, axis=0)
    groups = np.repeat(np.arange(n // 2), 2)
    res = cross_validate(x, y, groups, np.ones(n), C=1.0)
    assert res["auroc"] < 0.75


def test_threshold_for_precision() -> None:
    p = np.array([0.9, 0.8, 0.8, 0.6, 0.4, 0.2])
    y = np.array([1, 1, 0, 1, 0, 0])
    thr, prec, kept = threshold_for_precision(p, y, 0.75)
    assert (thr, prec, kept) == (0.6, 0.75, 1.0)  # keeps the tie at 0.8 whole
    thr, _, kept = threshold_for_precision(p, y, 0.95)
    assert (thr, kept) == (0.9, pytest.approx(1 / 3))
    assert threshold_for_precision(np.array([0.5, 0.5]), np.array([0, 1]), 0.9)[0] is None


def row(cand: Candidate, auroc_lc: float) -> dict[str, object]:
    return {"candidate": cand, "auroc": auroc_lc, "auroc_length_controlled": auroc_lc}


def test_choose_prefers_the_attention_free_card_at_equal_auroc() -> None:
    with_g = Candidate("mean", (4,), RUNTIME_SCALARS, 0.01)
    without_g = Candidate("mean", (4,), ATTENTION_FREE_SCALARS, 0.01)
    assert "grounding" not in without_g.scalars
    assert choose([row(with_g, 0.7771), row(without_g, 0.7768)])["candidate"] == without_g
    # a real gain from grounding still wins
    assert choose([row(with_g, 0.790), row(without_g, 0.777)])["candidate"] == with_g
    # search tries both
    tried = search(synthetic(), log=lambda _: None)
    scalar_sets = {r["candidate"].scalars for r in tried}
    assert RUNTIME_SCALARS in scalar_sets and ATTENTION_FREE_SCALARS in scalar_sets
