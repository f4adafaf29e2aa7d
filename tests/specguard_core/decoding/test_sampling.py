"""`sampling.py`: top-k / min-p restrict the sampled support (statistical tests on both sampling
paths), the repetition penalty is transformers' own, and speculative sampling keeps the target's
*shaped* distribution."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specguard_core import SpecGuardConfig
from specguard_core.config import parse_sets
from specguard_core.decoding.sampling import (
    Shaping,
    nucleus_probs,
    sample_tokens,
    sample_with_probs,
)
from specguard_core.engine.speculative import accepted_prefix, next_token
from tests.specguard_core.engine.stats_helpers import chi_square_p


def _logits(vocab: int = 20000, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab, generator=g)
    logits[:40] += torch.linspace(10.0, 7.0, 40)  # a head the nucleus lives in, a long tail
    return logits


@pytest.mark.parametrize("vocab", [5000, 300])  # the shortlist path, and the full sort
@pytest.mark.parametrize("shaping", [Shaping(top_k=7), Shaping(min_p=0.3),
                                     Shaping(top_k=20, min_p=0.2)])
def test_top_k_and_min_p_restrict_the_sampled_support(vocab: int, shaping: Shaping) -> None:
    logits, temp, top_p = _logits(vocab), 1.0, 0.95
    exact = nucleus_probs(logits, temp, top_p, shaping)  # [V]
    plain = nucleus_probs(logits, temp, top_p)
    support = exact > 0
    assert 0 < int(support.sum()) < int((plain > 0).sum())  # the knob really narrows it
    if shaping.top_k:
        assert int(support.sum()) <= shaping.top_k
    if shaping.min_p:
        assert float(exact[support].min()) >= shaping.min_p * float(exact.max()) - 1e-6
    n = 8000
    tokens, probs = sample_with_probs(logits.expand(n, -1), temp, top_p,
                                      torch.Generator().manual_seed(1), shaping=shaping)
    counts = torch.bincount(tokens, minlength=vocab).double()
    assert bool(support[tokens].all())  # never a token outside the shaped support
    assert chi_square_p(counts, exact) > 1e-3  # and the mass inside it is the exact distribution
    assert chi_square_p(counts, plain) < 1e-6  # the test tells the unshaped distribution apart
    assert torch.allclose(probs, exact[tokens].float(), rtol=1e-3)  # reported q(x) is exact


def test_the_exact_distribution_is_transformers_processors_in_their_order() -> None:
    """temperature, top-k, top-p, min-p as `generate` chains them: the same support, and the same
    probabilities (transformers' top-p keeps ties at its boundary slightly differently, so compare
    on a distribution without ties)."""
    logits, temp, top_p = _logits(500), 0.7, 0.9
    shaping = Shaping(top_k=30, min_p=0.05)
    ids = torch.empty(1, 0, dtype=torch.long)
    scores = logits[None]
    for warper in (TemperatureLogitsWarper(temp), TopKLogitsWarper(30), TopPLogitsWarper(top_p),
                   MinPLogitsWarper(0.05)):
        scores = warper(ids, scores)
    theirs = torch.softmax(scores[0], -1)
    ours = nucleus_probs(logits, temp, top_p, shaping)
    assert torch.equal(theirs > 0, ours > 0)
    assert torch.allclose(theirs, ours, atol=1e-5)


def test_greedy_ignores_the_warpers_but_not_the_penalty() -> None:
    logits = _logits(300)
    for shaping in (Shaping(top_k=3), Shaping(min_p=0.5)):
        assert int(sample_tokens(logits[None], 0.0, 0.8, torch.Generator(), shaping=shaping)) \
            == int(logits.argmax())
    top = int(logits.argmax())
    penal = Shaping(repetition_penalty=3.0)
    shaped = penal.penalise(logits[None], penal.history([top, 5, top]))
    assert int(shaped.argmax()) != top  # the repeated top token lost its place
    theirs = RepetitionPenaltyLogitsProcessor(3.0)(torch.tensor([[top, 5, top]]), logits[None])
    assert torch.equal(shaped, theirs)
    row = logits[None]
    assert Shaping().penalise(row, None) is row  # no penalty: the logits as they were
    assert Shaping().history([1, 2]) is None


def test_penalise_rows_penalises_each_row_for_its_own_sequence() -> None:
    logits = torch.randn(4, 50)  # rows predict ids[0..3] after the prefix
    shaping, prefix, ids = Shaping(repetition_penalty=1.7), [3, 9], [11, 3, 40]
    rows = shaping.penalise_rows(logits, prefix, ids)
    for i in range(4):
        alone = RepetitionPenaltyLogitsProcessor(1.7)(torch.tensor([prefix + ids[:i]]),
                                                      logits[i: i + 1].clone())
        assert torch.equal(rows[i], alone[0])


def test_config_fields_validate_with_defaults_that_change_nothing() -> None:
    cfg = SpecGuardConfig()
    assert (cfg.top_k, cfg.min_p, cfg.repetition_penalty) == (0, 0.0, 1.0)
    assert Shaping.of(cfg) == Shaping()
    assert SpecGuardConfig(top_k=-1).top_k == 0  # vLLM's "all tokens"
    for bad in (dict(top_k=-2), dict(min_p=1.5), dict(min_p=-0.1), dict(repetition_penalty=0.0),
                dict(repetition_penalty=float("inf")), dict(top_k=2.5)):
        with pytest.raises(ValueError):
            SpecGuardConfig(**bad)
    # `specguard run/serve --set` takes them like any field
    assert parse_sets(["top_k=5", "min_p=0.1", "repetition_penalty=1.2"]) == {
        "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2}
    with pytest.raises(ValueError, match="top_k"):
        parse_sets(["top_k=-3"])


def _next_logits(model: Any, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids], device=model.device)).logits[0, -1].float()  # [V]


def test_speculative_sampling_keeps_the_targets_shaped_distribution(
        tiny_pair_on: tuple[Any, Any, Any, Any], device: str) -> None:
    """Draft samples from its shaped q, the target accepts with its shaped p: the output is p."""
    draft, tok, target, _ = tiny_pair_on
    ids = tok("The answer is", add_special_tokens=False)["input_ids"]
    temp, top_p, shaping = 0.1, 0.95, Shaping(top_k=20, min_p=0.01, repetition_penalty=1.3)
    p_row = shaping.penalise_rows(_next_logits(target, ids)[None], ids, [])  # [1, V]
    q_row = shaping.penalise(_next_logits(draft, ids)[None], shaping.history(ids))  # [1, V]
    p, q = nucleus_probs(p_row[0], temp, top_p, shaping), nucleus_probs(q_row[0], temp, top_p,
                                                                         shaping)
    assert float((p - q).abs().sum()) / 2 > 0.2  # the two really differ
    assert int((p > 0).sum()) <= 20 and not torch.equal(
        p, nucleus_probs(_next_logits(target, ids), temp, top_p))  # shaping changed p
    gen = torch.Generator(device).manual_seed(0)  # where the logits are, as the engine's
    n, counts, accepted = 6000, torch.zeros_like(p), 0
    rows = p_row.expand(2, -1)  # [2, V]: row 0 judges the draft token
    for _ in range(n):
        x, qx = sample_with_probs(q_row, temp, top_p, gen, shaping=shaping)
        m = accepted_prefix(rows, [int(x)], [float(qx)], temp, top_p, gen, shaping)
        out = int(x) if m == 1 else next_token(p_row[0], temp, top_p, gen, q, shaping)
        accepted += m
        counts[out] += 1
    assert 0 < accepted < n
    assert chi_square_p(counts, p) > 1e-3
    assert chi_square_p(counts, q) < 1e-6


