"""The paper's signals and decision rule as pure tensor maths (tensors in, numbers out).

Notation: a step S of T tokens follows a context of c tokens. `rows[l]` holds, for the last layers
l = 1..L (oldest first), the head-averaged attention rows of the step tokens restricted to the step
columns: `rows: [L, T, T]`, lower-triangular. Because attention is causal and the context is a prefix,
rollout mass that reaches the context stays there, so the grounding of token t is
`g_t = 1 - sum_s R[t, s]` with `R = A_L[S,S] @ ... @ A_1[S,S]` (exact when each row is renormalised
after small values are dropped; tested against a brute-force rollout).
"""

from __future__ import annotations

import math

import torch


def sparsify_rows(attn: torch.Tensor, threshold: float) -> torch.Tensor:
    """Drop attention values below `threshold` and renormalise each row to sum to 1.

    `attn: [..., n]` rows of a softmax. The row maximum is always kept, so no row becomes empty.
    """
    attn = attn.float()
    keep = (attn >= threshold) | (attn == attn.amax(dim=-1, keepdim=True))
    kept = attn * keep
    return kept / kept.sum(dim=-1, keepdim=True)


def with_residual(step_rows: torch.Tensor) -> torch.Tensor:
    """Rollout's residual term: 0.5 * A + 0.5 * I on the step block (`[L, T, T]`)."""
    eye = torch.eye(step_rows.shape[-1], dtype=step_rows.dtype, device=step_rows.device)
    return 0.5 * step_rows + 0.5 * eye


def grounding_per_token(step_rows: torch.Tensor, residual: bool = False) -> torch.Tensor:
    """Rollout mass on the context for each step token: `[L, T, T] -> [T]`.

    Rows must already be sparsified and renormalised over the *full* row (context + step), so the
    mass missing from a step row is exactly the mass on the context.
    """
    rows = with_residual(step_rows) if residual else step_rows.float()
    rollout = rows[0]  # [T, T]
    for layer in rows[1:]:
        rollout = layer @ rollout  # later layers apply on the left
    return (1.0 - rollout.sum(dim=-1)).clamp(0.0, 1.0)


def grounding(step_rows: torch.Tensor, residual: bool = False) -> float:
    """g = min over the step's tokens of the rollout mass on the context (1.0 for an empty step)."""
    if step_rows.shape[-1] == 0:
        return 1.0
    return float(grounding_per_token(step_rows, residual).min())


def confidence(token_logprobs: torch.Tensor) -> float:
    """l = min over the step's tokens of log p(token | context) (0.0 for an empty step)."""
    return float(token_logprobs.min()) if token_logprobs.numel() else 0.0


MEDOID_TIE = 1e-5  # soft_medoid: diagonal values this close are a tie (float32 rounding ~1e-7)


def soft_medoid(embeddings: torch.Tensor) -> int:
    """Self-consistency selection: `[k, d] -> index`.

    Rows are unit-normalised, S = cosine matrix, row-softmax; the pick is argmin of the diagonal,
    i.e. the candidate whose own similarity weighs least against its similarity to the others.
    Values within `MEDOID_TIE` of the minimum tie, and a tie goes to the lowest index: with k = 2
    the diagonal is equal by construction, so the pick would otherwise be decided by float
    rounding (and could differ between a solo and a batched forward of the same candidates;
    with k >= 3 values near the window's edge still can). A non-finite value never wins.
    """
    if embeddings.shape[0] == 1:
        return 0
    finite = torch.isfinite(embeddings).all(dim=-1)  # [k]
    if not finite.all():  # one NaN row would make every similarity NaN: judge the others
        keep = torch.nonzero(finite)[:, 0]
        return int(keep[soft_medoid(embeddings[keep])]) if len(keep) else 0
    unit = torch.nn.functional.normalize(embeddings.float(), dim=-1)
    sim = torch.softmax(unit @ unit.T, dim=-1)  # [k, k]
    diag = torch.nan_to_num(torch.diagonal(sim), nan=math.inf)  # [k]
    return int(torch.nonzero(diag <= diag.min() + MEDOID_TIE)[0, 0])


def min_max(value: float, low: float, high: float) -> float:
    """Clip-normalise `value` from [low, high] to [0, 1]."""
    return min(1.0, max(0.0, (value - low) / (high - low)))


def ensemble(conf_norm: float, ground_norm: float, beta: float) -> float:
    """r = beta * l~ + (1 - beta) * g~."""
    return beta * conf_norm + (1.0 - beta) * ground_norm


def accept(score: float, tau: float) -> bool:
    """Accept iff r >= tau (tau = -inf always accepts, +inf never does)."""
    return not math.isnan(score) and score >= tau


def percentile_bounds(values: list[float], low_q: float = 1.0, high_q: float = 99.0
                      ) -> tuple[float, float]:
    """(low, high) percentiles of `values`, widened to a non-empty interval."""
    if not values:
        raise ValueError("no values to calibrate from")
    t = torch.tensor(values, dtype=torch.float64)
    low, high = float(torch.quantile(t, low_q / 100)), float(torch.quantile(t, high_q / 100))
    return (low, high) if high > low else (low - 1e-3, high + 1e-3)
