"""Goodness-of-fit helpers for the sampling tests (torch only, no scipy)."""

from __future__ import annotations

import torch


def chi_square_p(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """p-value of Pearson's chi-square test of `counts: [V]` against `probs: [V]`; categories with
    an expected count under `min_expected` are pooled into one."""
    n = float(counts.sum())
    expected = probs.double() * n
    big = expected >= min_expected
    obs = torch.cat([counts.double()[big], counts.double()[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    if float(exp[-1]) < min_expected:  # nothing (or too little) left to pool
        obs, exp = obs[:-1], exp[:-1]
        if float(obs.sum()) != n:  # the pooled observations must then be nearly absent
            return 0.0 if float(counts.double()[~big].sum()) > min_expected else 1.0
    stat = ((obs - exp) ** 2 / exp).sum()
    df = torch.tensor(float(len(obs) - 1), dtype=torch.float64)
    return float(torch.special.gammaincc(df / 2, stat / 2))
