"""The acceptance rules: speculative sampling keeps the target's distribution (a statistical test on
a tiny model's logits), greedy acceptance, Medusa's typical acceptance."""

from __future__ import annotations

from typing import Any

import torch

from specguard_core.decoding.sampling import nucleus_probs, sample_with_probs
from specguard_core.engine.speculative import accepted_prefix, next_token
from tests.specguard_core.engine.stats_helpers import chi_square_p


def _next_logits(model: Any, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids], device=model.device)).logits[0, -1].float()  # [V]


def test_speculative_sampling_keeps_the_target_distribution(
        tiny_pair_on: tuple[Any, Any, Any, Any], device: str) -> None:
    draft, tok, target, _ = tiny_pair_on
    ids = tok("The answer is", add_special_tokens=False)["input_ids"]
    temp, top_p = 0.05, 0.95  # tiny random models are nearly flat: a low temperature peaks them
    p_logits, q_logits = _next_logits(target, ids), _next_logits(draft, ids)
    p, q = nucleus_probs(p_logits, temp, top_p), nucleus_probs(q_logits, temp, top_p)
    assert float((p - q).abs().sum()) / 2 > 0.2  # the two really differ
    gen = torch.Generator(device).manual_seed(0)  # where the logits are, as the engine's
    n, counts, accepted = 6000, torch.zeros_like(p), 0
    rows = torch.stack([p_logits, p_logits])  # [2, V]: row 0 judges the draft token
    for _ in range(n):
        x, qx = sample_with_probs(q_logits[None], temp, top_p, gen)
        m = accepted_prefix(rows, [int(x)], [float(qx)], temp, top_p, gen)
        out = int(x) if m == 1 else next_token(p_logits, temp, top_p, gen, draft_q=q)
        accepted += m
        counts[out] += 1
    assert 0 < accepted < n
    assert chi_square_p(counts, p) > 1e-3
    assert chi_square_p(counts, q) < 1e-6  # the test can tell the draft's distribution apart


def test_greedy_acceptance_keeps_the_agreeing_prefix() -> None:
    logits = torch.full((4, 5), -1.0)
    for row, best in enumerate([2, 0, 4, 1]):
        logits[row, best] = 1.0
    gen = torch.Generator()
    assert accepted_prefix(logits, [2, 0, 3], [1.0] * 3, 0.0, 1.0, gen) == 2
    assert next_token(logits[2], 0.0, 1.0, gen) == 4
    assert accepted_prefix(logits, [2, 0, 4], [1.0] * 3, 0.0, 1.0, gen) == 3
    assert accepted_prefix(logits, [1], [1.0], 0.0, 1.0, gen) == 0


def test_the_residual_works_across_padded_vocabulary_widths() -> None:
    """Qwen2.5 0.5B pads its lm_head to 151,936 rows, 7B and up to 152,064: the draft's q and the
    target's p differ in width; the residual is taken over the shared tokens."""
    gen = torch.Generator().manual_seed(0)
    target = torch.tensor([2.0, 1.0, 0.0, -30.0, -30.0])  # wider target, padding rows ~0
    q = torch.tensor([1.0, 0.0, 0.0])  # the draft put everything on token 0
    picks = {next_token(target, 1.0, 1.0, gen, q) for _ in range(50)}
    assert picks and 0 not in picks and picks <= {1, 2}  # the residual excludes token 0
    assert next_token(target[:3], 1.0, 1.0, gen, torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])) != 0


def test_draft_doubts_its_last_token_or_the_product_of_its_run() -> None:
    import math

    from specguard_core.engine.speculative import draft_doubts

    run = [math.log(0.9)] * 4  # product 0.66
    assert draft_doubts(run, 0.0, 0.7) and not draft_doubts(run[:3], 0.0, 0.7)  # 0.73 at 3
    assert not draft_doubts(run, 0.7, 0.0)  # every token is above 0.7 on its own
    assert draft_doubts(run + [math.log(0.5)], 0.7, 0.0)
    assert not draft_doubts([math.log(1e-9)], 0.0, 0.0)  # both rules off
