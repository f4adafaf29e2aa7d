"""Speculative decoding's token maths on a target pass (pure: logits in, decisions out).

- `accepted_prefix`: how many of the draft's tokens the target keeps. Greedy (temperature 0): tokens
  equal to the target's argmax. Sampling: the speculative-sampling rule (Leviathan et al. 2023, Chen
  et al. 2023): keep token x with probability min(1, p(x) / q(x)).
- `next_token`: the target's own token after the kept prefix: its argmax (greedy), a sample of the
  residual norm(max(0, p - q)) after a rejection, or of p after a fully kept run, so the output is
  distributed exactly as the target's own sampling.
- `draft_doubts`: when the draft should stop and let the target judge its run (its own
  probabilities: the last token's, or the run's product; transformers' assistant confidence and
  SpecDec++'s stopping rule).

`p` is the target's distribution after the request's shaping (`decoding/sampling.py`: repetition
penalty, temperature, top-k, top-p, min-p; `nucleus_probs`), `q` the distribution the draft sampled
the token from, after the same shaping of the draft's logits. Logits passed in are already penalised
(`Shaping.penalise_rows`). The target check's token rules are `accept.py`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from specguard_core.decoding.sampling import NO_SHAPING, Shaping, nucleus_probs


def draft_doubts(run_logprobs: Sequence[float], token_below: float, run_below: float) -> bool:
    """Whether the draft doubts its run (`run_logprobs`: its raw log-probabilities of the run's
    tokens so far): the last token has probability below `token_below`, or the product over the
    run is below `run_below` (its own estimate that the target keeps the whole run). 0 turns
    either rule off. Used to end a fallback draft run and to check a step while it is written."""
    last_doubted = token_below > 0 and math.exp(run_logprobs[-1]) < token_below
    return last_doubted or (run_below > 0 and math.exp(sum(run_logprobs)) < run_below)


def accepted_prefix(target_logits: torch.Tensor, ids: list[int], q_of_ids: list[float],
                    temperature: float, top_p: float, generator: torch.Generator,
                    shaping: Shaping = NO_SHAPING) -> int:
    """`target_logits: [>=T, V]` (row i predicts `ids[i]`), `q_of_ids: [T]` -> kept tokens m <= T."""
    n = len(ids)
    if n == 0:
        return 0
    if temperature == 0:
        agree = (target_logits[:n].argmax(-1) == torch.tensor(ids, device=target_logits.device))
        return int(agree.long().cumprod(0).sum())  # one host sync
    p = nucleus_probs(target_logits[:n], temperature, top_p, shaping)  # [T, V]
    p_x = p.gather(-1, torch.tensor(ids, device=p.device)[:, None])[:, 0]  # [T]
    u = torch.rand(n, generator=generator, device=generator.device).to(p.device)
    q = torch.tensor(q_of_ids, device=p.device).clamp_min(1e-20)
    keep = (u < p_x / q).long()  # [T]
    return int(keep.cumprod(0).sum())


def next_token(target_logits: torch.Tensor, temperature: float, top_p: float,
               generator: torch.Generator, draft_q: torch.Tensor | None = None,
               shaping: Shaping = NO_SHAPING) -> int:
    """The target's token from `target_logits: [V]`; `draft_q: [V]` is the draft's distribution at
    this position when the draft's token here was rejected (sample the residual), else None."""
    if temperature == 0:
        return int(target_logits.argmax())
    p = nucleus_probs(target_logits, temperature, top_p, shaping)  # [V]
    if draft_q is not None:
        q = draft_q.to(p.device)
        if q.shape[-1] != p.shape[-1]:  # one tokenizer, lm_heads padded to different widths
            w = min(q.shape[-1], p.shape[-1])  # the padding rows are no real token: mass ~0
            q = torch.nn.functional.pad(q[:w], (0, p.shape[-1] - w))
        residual = (p - q).clamp_min(0.0)
        if float(residual.sum()) > 0:  # p == q leaves nothing: then no token was rejectable
            p = residual / residual.sum()
    pick = torch.multinomial(p.to(generator.device)[None], 1, generator=generator)
    return int(pick[0, 0])
