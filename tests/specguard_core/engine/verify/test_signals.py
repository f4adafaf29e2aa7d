"""Signals and the decision rule against brute force and hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from specguard_core.config import NormBounds, SpecGuardConfig
from specguard_core.engine.verify import signals
from specguard_core.engine.verify.verifier import Scores, decide_route


def random_causal_attention(n: int, generator: torch.Generator) -> torch.Tensor:
    """A causal row-stochastic [n, n] matrix with some small entries to be sparsified."""
    logits = torch.randn(n, n, generator=generator) * 2.0
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    return torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)


def brute_force_grounding(maps: list[torch.Tensor], n_ctx: int, threshold: float,
                          residual: bool) -> torch.Tensor:
    """Full n x n rollout over the last layers; mass of each step row on the context columns."""
    rollout = None
    for attn in maps:  # oldest layer first
        a = signals.sparsify_rows(attn, threshold)
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(a.shape[0])
        rollout = a if rollout is None else a @ rollout
    assert rollout is not None
    return rollout[n_ctx:, :n_ctx].sum(dim=-1)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_grounding_from_step_rows_equals_brute_force_rollout(seed: int, residual: bool) -> None:
    g = torch.Generator().manual_seed(seed)
    n_ctx, n_step = 7 + seed, 5
    n = n_ctx + n_step
    maps = [random_causal_attention(n, g) for _ in range(3)]
    expected = brute_force_grounding(maps, n_ctx, 0.01, residual)
    # what the engine keeps: sparsified step rows, restricted to the step columns
    step_rows = torch.stack([signals.sparsify_rows(m, 0.01)[n_ctx:, n_ctx:] for m in maps])
    got = signals.grounding_per_token(step_rows, residual)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert signals.grounding(step_rows, residual) == pytest.approx(float(expected.min()), abs=1e-6)


def test_sparsify_drops_small_values_and_renormalises() -> None:
    rows = torch.tensor([[0.5, 0.495, 0.005], [0.004, 0.006, 0.99]])
    out = signals.sparsify_rows(rows, 0.01)
    torch.testing.assert_close(out[0], torch.tensor([0.5, 0.495, 0.0]) / 0.995)
    torch.testing.assert_close(out[1], torch.tensor([0.0, 0.0, 1.0]))


def test_grounding_of_step_that_only_attends_to_itself_is_zero() -> None:
    rows = torch.eye(3).expand(3, 3, 3)  # every step token attends only to itself
    assert signals.grounding(rows) == pytest.approx(0.0)
    assert signals.grounding(torch.zeros(3, 2, 2)) == pytest.approx(1.0)  # all mass on context


def test_confidence_is_min_token_logprob() -> None:
    assert signals.confidence(torch.tensor([-0.1, -2.5, -0.3])) == pytest.approx(-2.5)
    assert signals.confidence(torch.tensor([])) == 0.0


def test_soft_medoid_picks_the_candidate_closest_to_the_others() -> None:
    emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.8, 0.2], [-1.0, 0.3]])
    assert signals.soft_medoid(emb) == 1  # the middle of the cluster, not the outlier
    assert signals.soft_medoid(torch.tensor([[0.0, 1.0]])) == 0


def test_soft_medoid_breaks_ties_by_the_lowest_index_not_by_rounding() -> None:
    pair = torch.randn(2, 8, generator=torch.Generator().manual_seed(1))
    assert signals.soft_medoid(pair) == 0  # k = 2: an exact tie by construction
    assert signals.soft_medoid(pair.flip(0)) == 0
    noisy = pair + 1e-7 * torch.randn(2, 8, generator=torch.Generator().manual_seed(2))
    assert signals.soft_medoid(noisy.flip(0)) == 0  # rounding-sized changes do not flip it


def test_soft_medoid_never_picks_a_non_finite_candidate() -> None:
    emb = torch.tensor([[float("nan"), 1.0], [1.0, 0.0], [0.9, 0.1]])
    assert signals.soft_medoid(emb) in (1, 2)
    assert signals.soft_medoid(torch.full((3, 2), float("nan"))) == 0  # no crash


def test_soft_medoid_matches_definition() -> None:
    emb = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    unit = emb / emb.norm(dim=-1, keepdim=True)
    diag = torch.diagonal(torch.softmax(unit @ unit.T, dim=-1))
    assert signals.soft_medoid(emb) == int(diag.argmin())


@pytest.mark.parametrize(
    ("conf", "ground", "beta", "tau", "score", "accepted"),
    [
        (-4.0, 0.5, 0.3, 0.7, 0.3 * 0.5 + 0.7 * 0.5, False),  # mid both
        (0.0, 1.0, 0.3, 0.7, 1.0, True),
        (-9.0, 1.0, 0.3, 0.7, 0.7, True),  # confidence clipped to 0; r == tau accepts
        (-2.0, 0.2, 0.5, 0.45, 0.5 * 0.75 + 0.5 * 0.2, True),
        (-2.0, 0.2, 0.5, 0.6, 0.475, False),
    ],
)
def test_decision_matches_hand_computed(conf: float, ground: float, beta: float, tau: float,
                                        score: float, accepted: bool) -> None:
    cfg = SpecGuardConfig(verifier="paper", beta=beta, tau=tau,
                          bounds=NormBounds(confidence_min=-8.0, confidence_max=0.0))
    got_score, route = decide_route(Scores(conf, ground), cfg)
    assert got_score == pytest.approx(score)
    assert (route == "keep") is accepted


def test_infinite_thresholds() -> None:
    assert signals.accept(0.0, -math.inf) and not signals.accept(1.0, math.inf)


def test_percentile_bounds() -> None:
    low, high = signals.percentile_bounds([float(i) for i in range(101)], 1, 99)
    assert (low, high) == pytest.approx((1.0, 99.0))
    assert signals.percentile_bounds([2.0, 2.0])[0] < 2.0 < signals.percentile_bounds([2.0])[1]
