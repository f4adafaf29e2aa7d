"""Token-level acceptance rules on a target pass (pure tensor maths: logits in, decisions out).

- `accepted_prefix`: how many of the draft's tokens the target keeps. Greedy (temperature 0): tokens
  equal to the target's argmax. Sampling: the speculative-sampling rule (Leviathan et al. 2023, Chen
  et al. 2023): keep token x with probability min(1, p(x) / q(x)).
- `next_token`: the target's own token after the kept prefix: its argmax (greedy), a sample of the
  residual norm(max(0, p - q)) after a rejection, or of p after a fully kept run, so the output is
  distributed exactly as the target's own sampling.
- `typical_accept`: Medusa's typical acceptance (Cai et al. 2024): every token must have target
  probability p >= min(eps, delta * exp(-H)), H the entropy of the target's distribution there.
- `judged_prefix`: the target check under a named rule (`typical`; `exact`, the target's own
  tokens; `exact-numbers`, exact on digits, operators and list markers, typical elsewhere).
- `draft_doubts`: when the draft should stop and let the target judge its run (its own
  probabilities: the last token's, or the run's product; transformers' assistant confidence and
  SpecDec++'s stopping rule).

`p` is the target's distribution after the request's shaping (`decoding/sampling.py`: repetition
penalty, temperature, top-k, top-p, min-p; `nucleus_probs`), `q` the distribution the draft sampled
the token from, after the same shaping of the draft's logits. Logits passed in are already penalised
(`Shaping.penalise_rows`), except `typical_prefix`'s, which penalises them itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from specguard_core.config import SpecGuardConfig
from specguard_core.config import TokenRule as Rule
from specguard_core.decoding.sampling import NO_SHAPING, Shaping, nucleus_probs, warp_logits


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


def typical_accept(target_logits: torch.Tensor, ids: list[int], eps: float, delta: float,
                   shaping: Shaping = NO_SHAPING, prefix: Sequence[int] = (),
                   ratio: float = 0.0) -> bool:
    """`target_logits: [>=T, V]` (row i predicts `ids[i]`): every token passes
    p >= min(eps, delta * exp(-H)) and p >= ratio * max p under the target's temperature-1
    distribution after the request's repetition penalty (for `prefix + ids[:i]`), top-k and min-p
    (raw without them). `ratio` guards the positions where the target is sure: Medusa's bound
    alone lets a token the target gives 13% pass where it gives another 85% (a wrong digit);
    `ratio=1` passes the target's argmax only (the greedy target's own text)."""
    return typical_prefix(target_logits, ids, eps, delta, shaping, prefix, ratio) == len(ids)


def checked_prefix(target_logits: torch.Tensor, ids: list[int], cfg: SpecGuardConfig,
                   prefix: Sequence[int] = (), shaping: Shaping | None = None) -> int:
    """`typical_prefix` with the request's target-check settings (`typical_eps`, `typical_delta`,
    `typical_ratio`, its shaping: `Shaping.of(cfg)` unless the request's own, with its grammar,
    is given): how many leading tokens of `ids` the target check passes."""
    return typical_prefix(target_logits, ids, cfg.typical_eps, cfg.typical_delta,
                          shaping or Shaping.of(cfg), prefix, cfg.typical_ratio)


def judged_prefix(target_logits: torch.Tensor, ids: list[int], cfg: SpecGuardConfig,
                  prefix: Sequence[int] = (), rule: Rule = "typical",
                  sensitive: torch.Tensor | None = None, shaping: Shaping | None = None) -> int:
    """How many leading tokens of `ids` the target's check passes under `rule`
    (`target_logits: [>=T, V]`, row i predicting `ids[i]`; `sensitive: [V]` bool, the tokens
    `exact-numbers` judges exactly). Greedy, `exact` passes the target's argmax after the request's
    repetition penalty (the target's greedy text). Sampling, `exact` passes nothing and
    `exact-numbers` nothing from the first sensitive token on: the speculative fallback's
    speculative-sampling rule then judges those tokens, so they follow the target's distribution.
    `shaping`: the request's (`Shaping.of(cfg)` when None)."""
    shaping = shaping or Shaping.of(cfg)
    if rule == "typical" or not ids:
        return checked_prefix(target_logits, ids, cfg, prefix, shaping)
    n = len(ids)
    ids_t = torch.tensor(ids, device=target_logits.device)  # [T]
    exact_needed = torch.ones(n, dtype=torch.bool, device=target_logits.device)  # [T]
    if rule == "exact-numbers":
        assert sensitive is not None, "exact-numbers needs the sensitive-token mask"
        exact_needed = sensitive.to(target_logits.device)[ids_t]
    if cfg.temperature > 0:
        ok = ~exact_needed  # [T]
    else:
        rows = shaping.penalise_rows(target_logits[:n].float(), prefix, ids)  # [T, V]
        ok = (rows.argmax(-1) == ids_t) | ~exact_needed  # [T]
    exact_ok = int(ok.long().cumprod(0).sum())  # one host sync
    if rule == "exact":
        return exact_ok
    return min(exact_ok, checked_prefix(target_logits, ids, cfg, prefix, shaping))


def typical_prefix(target_logits: torch.Tensor, ids: list[int], eps: float, delta: float,
                   shaping: Shaping = NO_SHAPING, prefix: Sequence[int] = (),
                   ratio: float = 0.0) -> int:
    """How many leading tokens of `ids` pass the typical-acceptance bound (all: `len(ids)`);
    see `typical_accept`."""
    if not ids:
        return 0
    rows = shaping.penalise_rows(target_logits[: len(ids)].float(), prefix, ids)  # [T, V]
    logp = torch.log_softmax(warp_logits(rows, shaping), dim=-1)  # [T, V]
    plogp = logp.exp() * logp  # [T, V]
    if shaping.cuts:  # tokens they cut: 0 log 0 = 0
        plogp = plogp.masked_fill(logp.isneginf(), 0.0)
    entropy = -plogp.sum(-1)  # [T]
    p_x = logp.gather(-1, torch.tensor(ids, device=logp.device)[:, None])[:, 0].exp()  # [T]
    bound = torch.minimum(torch.full_like(entropy, eps), delta * torch.exp(-entropy))  # [T]
    if ratio > 0:
        bound = torch.maximum(bound, ratio * logp.max(dim=-1).values.exp())
    return int((p_x >= bound).long().cumprod(0).sum())  # one host sync
