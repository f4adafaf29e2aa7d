"""Log-probabilities read off logits rows (pure tensor maths): each token's raw (temperature-1,
unshaped) log-probability, as vLLM reports it by default, and the most likely tokens at its
position."""

from __future__ import annotations

from collections.abc import Sequence

import torch

Top = list[tuple[int, float]]  # (token id, log-probability), most likely first


def token_scores(rows: torch.Tensor, ids: Sequence[int], top: int = 0
                 ) -> tuple[list[float], list[Top]]:
    """`rows: [R, V]` logits, row i predicting `ids[i]` (R >= len(ids)) -> (each token's raw
    log-probability, the `top` most likely tokens at each position; [] each when `top` is 0)."""
    n = len(ids)
    if n == 0:
        return [], []
    logp = torch.log_softmax(rows[:n].float(), dim=-1)  # [n, V]
    chosen = logp.gather(-1, torch.tensor(list(ids), device=logp.device)[:, None])[:, 0]  # [n]
    return chosen.tolist(), top_of(logp, top) if top > 0 else [[] for _ in range(n)]


def top_of(logp: torch.Tensor, top: int) -> list[Top]:
    """`logp: [k, V]` log-probabilities -> each row's `top` most likely tokens."""
    values, order = logp.topk(min(top, logp.shape[-1]), dim=-1)  # [k, top]
    return [list(zip(i, v, strict=True)) for i, v in zip(order.tolist(), values.tolist(),
                                                         strict=True)]
