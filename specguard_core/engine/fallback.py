"""Fall back: the target writes (or verifies) a step the draft could not be trusted with.

- `regenerate`: the paper's fallback. The draft's proposal is discarded and the target writes the
  step itself (greedy, or `fallback_k` samples and the selector); one target forward per token.
- `speculate`: token-level speculative decoding inside the step. The target's one pass over the
  selected draft step (`first`, the same pass a target check or target scoring made) keeps the
  prefix it agrees with plus its own next token; then the draft proposes `req.draft_run` tokens
  from its persistent cache and the target verifies them in one pass, until the step ends. The run
  length adapts as transformers' assisted generation does (+2 when all were kept, -1 otherwise),
  and with `sd_confidence` a run also ends after a token the draft gives less than that probability
  (transformers' `assistant_confidence_threshold`); with `sd_run_confidence`, once the product of
  the draft's probabilities of the run's tokens (its estimate that the target keeps the whole run)
  falls below that value: a cheap-to-draft, costly-to-verify pair wastes fewer draft tokens on runs
  the target will cut (SpecDec++'s stopping rule with the draft's own probabilities).
  Greedy with `fallback_acceptance="typical"`, a drafted token is also kept when it passes the
  target check's typical acceptance (the same rule as `target-checked` steps; not the target's
  greedy text any more).

Both end with each cache holding the committed ids (or with them pending), never re-encoding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch

from specguard_core.cache.model import CachedModel
from specguard_core.cache.state import CacheState, Target, TentativePass
from specguard_core.decoding.guesses import GuessFeed
from specguard_core.decoding.logprobs import Top, token_scores
from specguard_core.decoding.proposal import Proposal, SampleSpec
from specguard_core.decoding.sampling import nucleus_probs, sample_with_probs
from specguard_core.engine.accept import typical_passed
from specguard_core.engine.proposer import propose
from specguard_core.engine.request import Request, Step
from specguard_core.engine.selector import Selector
from specguard_core.engine.speculative import accepted_prefix, draft_doubts, next_token
from specguard_core.text.chat import forced_call_prefix
from specguard_core.text.step_text import StepText

Convert = Callable[[list[int], Target, Target], list[int]]


@runtime_checkable
class StepWriter(Protocol):
    """A target that generates a whole step itself (a serving engine), instead of the loop
    decoding it token by token."""

    def write_step(self, state: CacheState, spec: SampleSpec, generator: torch.Generator,
                   prior: str = "", check: Callable[[], None] | None = None) -> Proposal: ...


def write_step(target: Target, state: CacheState, spec: SampleSpec, generator: torch.Generator,
               prior: str = "", check: Callable[[], None] | None = None) -> Proposal:
    """`spec.k` candidate steps written by the target after `state`'s prefix (end the `Proposal`
    with keep or discard), by the target itself when it is a `StepWriter`, else by `propose`."""
    if isinstance(target, StepWriter):
        return target.write_step(state, spec, generator, prior, check)
    assert isinstance(target, CachedModel), f"{type(target).__name__} cannot write steps"
    return propose(target, state, spec, generator, prior, check=check)



def generated(proposal: Proposal) -> int:
    """Draft tokens the proposal produced, all rows."""
    return sum(len(c.token_ids) for c in proposal.candidates)


def regenerate(draft: CachedModel, target: Target, req: Request, proposal: Proposal,
               selector: Selector, convert: Convert) -> Step:
    """Discard the draft's proposal and let the target write this step."""
    proposal.discard()
    target.catch_up(req.target)
    prior, prior_ids = "", []
    if req.forced:  # enforce the tool choice: start the call for it
        assert req.required is not None
        prior = forced_call_prefix(req.required)
        prior_ids = target.encode(prior)
        target.extend(req.target, prior_ids)
    cfg = req.cfg
    sample = req.plan.fallback == "sample"
    k = req.plan.fallback_samples
    spec = SampleSpec(k, cfg.temperature if sample else 0.0, cfg.top_p,
                      max(1, req.budget(req.target)), req.rules, None,
                      hidden=k > 1 and selector.mode == "hidden", shaping=req.shaping,
                      grace=req.grace(), call_tokens=req.call_budget(),
                      top_logprobs=req.top_logprobs)
    written = write_step(target, req.target, spec, req.generator, prior, check=req.check)
    i = selector.select(written.candidates)
    cand = written.candidates[i]
    written.keep(i)
    req.draft.pending += convert(prior_ids + cand.fed, target, draft)
    logprobs: list[float | None] = [None] * len(prior_ids)  # forced, not chosen by a model
    tops: list[Top] = [[] for _ in prior_ids]
    return Step(prior_ids + cand.token_ids, prior + cand.text, "target", cand.end == "eos", k,
                path="regenerated", draft_generated=generated(proposal),
                token_logprobs=logprobs + list(cand.logprobs), cut=cand.end == "budget",
                top_logprobs=tops + list(cand.top_logprobs))


def speculate(draft: CachedModel, target: Target, req: Request, proposal: Proposal,
              pick: int, first: TentativePass, checked: int = 0) -> Step:
    """Finish this step with token-level speculative decoding, starting from the target's pass
    `first` over candidate `pick` (same vocabulary). Greedy when temperature is 0, else exact
    speculative sampling of the target's distribution. `checked` leading tokens passed the
    target's check under its token rule and are kept too (greedy mode; 0 when unchecked), so a
    failed check keeps everything before its first failing token. Both models' logits go through
    the request's shaping (`sampling.Shaping`, each penalised for its own sequence so far), so the
    output follows the target's shaped distribution."""
    cfg, gen = req.cfg, req.generator
    temp, top_p, shaping = cfg.temperature, cfg.top_p, req.shaping
    cand = proposal.candidates[pick]
    text = StepText(target, req.rules, max(1, req.budget(req.target)), grace=req.grace(),
                    call_tokens=req.call_budget())
    p_rows = shaping.penalise_rows(first.logits, req.target.ids, cand.token_ids)  # [T+1, V]
    m = accepted_prefix(p_rows, cand.token_ids, cand.sample_probs, temp, top_p, gen, shaping)
    if temp == 0:
        m = max(m, min(checked, len(cand.token_ids)))
    proposal.keep(pick, m)
    q = None
    if m < len(cand.token_ids) and temp > 0:  # the draft's distribution where it was rejected
        q_row = shaping.penalise(draft.next_logits(req.draft)[None],
                                 shaping.history(req.draft.ids, 1, draft.device))  # [1, V]
        q = nucleus_probs(q_row[0], temp, top_p, shaping)
    nxt = next_token(p_rows[m], temp, top_p, gen, q, shaping) if m < len(p_rows) else None
    n_in = _push(text, cand.token_ids[:m], nxt)
    # every token as the target's rows read it (it verified the draft's, wrote its own)
    logprobs, tops = _scored(first.logits, cand.token_ids[:m], nxt, n_in, req.top_logprobs)
    verified = min(n_in, m)
    first.keep(min(verified, len(first.ids)))
    draft.rollback(req.draft, len(req.draft.ids) - (min(m, cand.n_fed) - min(verified, cand.n_fed)))
    _pend(draft, target, req, nxt if n_in > m else None)
    made, written = generated(proposal), verified
    while text.end is None:
        req.check()
        draft.catch_up(req.draft)
        n0 = len(req.draft.ids)
        toks, q_x, q_logits, _ = _draft_run(draft, req.draft, min(req.draft_run, text.room()),
                                            req)
        made += len(toks)
        feed = toks[:-1] if toks[-1] in draft.eos_ids else toks
        tpass = target.try_tokens(req.target, feed)
        p_rows = shaping.penalise_rows(tpass.logits, req.target.ids, toks)  # [T+1, V]
        m = accepted_prefix(p_rows, toks, q_x, temp, top_p, gen, shaping)
        if temp == 0 and cfg.experimental.fallback_acceptance == "typical":
            m = max(m, typical_passed(tpass.logits, toks, cfg, req.target.ids, shaping))
        grow = m == len(toks)
        req.draft_run = min(cfg.experimental.sd_max_draft_tokens, req.draft_run + 2) if grow else \
            max(1, req.draft_run - 1)
        q = nucleus_probs(q_logits[m], temp, top_p, shaping) if m < len(toks) and temp > 0 \
            else None
        nxt = next_token(p_rows[m], temp, top_p, gen, q, shaping) if m < len(p_rows) else None
        n_in = _push(text, toks[:m], nxt)
        lps, top = _scored(tpass.logits, toks[:m], nxt, n_in, req.top_logprobs)
        logprobs, tops = logprobs + lps, tops + top
        kept = min(n_in, m)
        written += kept
        tpass.keep(min(kept, len(feed)))
        n_fed = len(toks) - 1  # the last drafted token was never fed to the draft
        if kept <= n_fed:
            draft.rollback(req.draft, n0 + kept)
        elif toks[-1] not in draft.eos_ids:
            req.draft.pending.append(toks[-1])
        _pend(draft, target, req, nxt if n_in > m else None)
    dropped = text.trim() if text.end == "budget" else 0
    if dropped:  # never end mid-character: both models forget the unfinished character
        target.unwind(req.target, dropped)
        draft.unwind(req.draft, dropped)
        written = min(written, len(text.token_ids))
    return Step(text.token_ids, text.text, "target", text.end == "eos", len(proposal.candidates),
                path="target-verified", verified_prefix=verified, draft_written=written,
                draft_generated=made, token_logprobs=list(logprobs[: len(text.token_ids)]),
                top_logprobs=tops[: len(text.token_ids)], cut=text.end == "budget")


def _scored(rows: torch.Tensor, accepted: list[int], nxt: int | None, n: int, top: int
            ) -> tuple[list[float], list[Top]]:
    """The first `n` of `accepted + [nxt]` scored by the target's pass `rows` (`[T+1, V]`, row i
    predicting token i): raw log-probabilities and `top` alternatives."""
    return token_scores(rows, (accepted + ([] if nxt is None else [nxt]))[:n], top)


def _push(text: StepText, accepted: list[int], nxt: int | None) -> int:
    """Add the kept draft tokens and the target's own next token to the step until it ends;
    returns how many entered it."""
    n = 0
    for tok in accepted + ([] if nxt is None else [nxt]):
        if text.add(tok) == "before":
            break
        n += 1
        if text.end is not None:
            break
    return n


def _pend(draft: CachedModel, target: Target, req: Request, tok: int | None) -> None:
    """The target's own token joined the step: both models encode it with their next pass."""
    if tok is not None and tok not in target.eos_ids:
        req.target.pending.append(tok)
        req.draft.pending.append(tok)


def _draft_run(draft: CachedModel, state: CacheState, g: int, req: Request
               ) -> tuple[list[int], list[float], list[torch.Tensor], list[float]]:
    """The draft proposes up to `g` tokens after its committed prefix (stopping at EOS): (tokens,
    their sampling probabilities q(x), the draft's penalised logits `[V]` at each, their raw
    log-probabilities). All but the last are fed and committed here (the caller rolls back what
    the target rejects).

    The forwards go through a `GuessFeed`: with `draft_lookahead`, each also feeds the tokens
    prompt lookup expects next, and a guess the draft then picks itself (the same sample of the
    same logits) costs no forward of its own. The run's tokens and probabilities are the draft's
    own either way, only its forwards are fewer."""
    toks: list[int] = []
    probs: list[float] = []
    rows: list[torch.Tensor] = []
    lps: list[float] = []
    shaping, cfg = req.shaping, req.cfg
    guesses = GuessFeed(draft, state, req.plan.guesses)
    raw = draft.next_logits(state)  # [V] predicts the run's next token
    for j in range(max(1, g)):
        logits = shaping.penalise(raw[None], shaping.history(state.ids + guesses.fed, 1,
                                                             draft.device))[0]  # [V]
        tok, prob = sample_with_probs(logits[None], cfg.temperature, cfg.top_p, req.generator,
                                      shaping=shaping)
        lp = raw[tok[0]].float() - torch.logsumexp(raw.float(), dim=-1)  # raw log p(tok)
        t, p, logp = torch.stack([tok[0].to(prob.dtype), prob[0], lp.to(prob.dtype)]
                                 ).tolist()  # one transfer per token
        toks.append(int(t))
        probs.append(p)
        rows.append(logits)
        lps.append(logp)
        if int(t) in draft.eos_ids or j == g - 1 or draft_doubts(
                lps, cfg.experimental.sd_confidence, cfg.sd_run_confidence):
            break  # the run's last token stays unfed; one the draft doubts is likely refused
        raw = guesses.feed(int(t), room=g - j - 2).logits[0, -1]
    guesses.commit()
    return toks, probs, rows, lps
