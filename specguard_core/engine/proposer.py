"""Propose: sample k candidate next steps from the committed prefix as one batch.

Used for the draft's proposals (with attention capture for grounding) and for the target's
regeneration (k=1 greedy or k samples). The k rows share the prefix's KV cache (forked in place);
each row stops at a step boundary (`steps.step_end`), an EOS token or the token budget, and every kept
token is fed through the model, so its attention row is captured and the cache of the chosen row is
complete when it is committed. `propose` returns a `Proposal` (`decoding/proposal.py`, with
`SampleSpec` and `Candidate`): `.keep(i)` commits row i's step, `.discard()` rolls the cache back
to the prefix. One host transfer per decode step (the sampled tokens and their log-probs); text
grows through an incremental detokeniser (`StepText`, in `text/step_text.py`: where a step ends,
on whole characters).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.model import CachedModel
from specguard_core.cache.state import CacheState, Forward
from specguard_core.decoding.guesses import GuessFeed
from specguard_core.decoding.logprobs import top_of
from specguard_core.decoding.proposal import Candidate, Proposal, SampleSpec
from specguard_core.decoding.sampling import sample_with_probs
from specguard_core.engine.verify.signals import sparsify_rows
from specguard_core.text.step_text import StepText


def propose(handle: CachedModel, state: CacheState, spec: SampleSpec,
            generator: torch.Generator, prior: str = "",
            check: Callable[[], None] | None = None,
            watch: Callable[[list[int], list[float]], bool] | None = None) -> Proposal:
    """Sample `spec.k` candidate steps after `state`'s prefix; `prior` is committed text that belongs
    to this step (a forced prefix). Leaves `state` forked: end the `Proposal` with keep or discard.
    `check()` runs before every decode step and may raise to stop the request mid-step.
    `watch(token_ids, logprobs)` (k == 1 only) sees the unfinished step after each fed token; when it
    returns True the step stops there, unfinished, with `end == "refused"`."""
    if (watch is not None or spec.lookahead) and spec.k != 1:
        raise ValueError(f"a watched or guessing proposal has one candidate, got k={spec.k}")
    k, n0, dev = spec.k, len(state.ids), handle.device
    logits = handle.next_logits(state).unsqueeze(0).expand(k, -1)  # [k, V]
    handle.fork(state, k)
    texts = [StepText(handle, spec.rules, spec.max_tokens, prior, spec.grace, spec.call_tokens)
             for _ in range(k)]
    cands = [Candidate() for _ in range(k)]
    att_rows: list[torch.Tensor] = []  # step t: [k, L, t + 1], grown with the step
    emb_sum: torch.Tensor | None = None  # [k, d]
    pool_sums: dict[int, torch.Tensor] = {}  # layer -> [k, d]
    whole_logits: dict[int, torch.Tensor] = {}  # row -> [V] after its last whole character
    history = spec.shaping.history(state.ids, k, dev)  # [k, n0 + t] for the penalty (None: none)
    hidden = spec.hidden or bool(spec.pool_layers)  # each forward returns hidden states
    guesses = GuessFeed(handle, state, spec.lookahead, hidden) if spec.lookahead else None
    for t in itertools.count() if spec.max_tokens else ():  # each row ends by `StepText.room`
        if check is not None:
            check()
        shaped = spec.shaping.penalise(logits, history)  # [k, V]
        tokens, probs = sample_with_probs(shaped, spec.temperature, spec.top_p, generator,
                                          shaping=spec.shaping)  # [k]
        if history is not None:
            history = torch.cat([history, tokens[:, None]], dim=1)
        logp = torch.log_softmax(logits, dim=-1)  # [k, V]
        logps = logp.gather(-1, tokens[:, None])[:, 0]  # [k]
        tops = top_of(logp, spec.top_logprobs) if spec.top_logprobs else None
        toks, lps, sps = torch.stack([tokens.to(logps.dtype), logps, probs.to(logps.dtype)]
                                     ).tolist()  # the one host transfer of this step
        fed: list[int] = []
        for i, c in enumerate(cands):
            if c.end is not None:
                continue
            tok = int(toks[i])
            added = texts[i].add(tok)
            if added != "before":
                c.logprobs.append(lps[i])
                c.sample_probs.append(sps[i])
                if tops is not None:
                    c.top_logprobs.append(tops[i])
            c.end = texts[i].end
            if added == "fed":
                fed.append(i)
            elif c.end is not None:
                c.next_logits = logits[i]
        if not fed:
            break
        recorder = AttentionRecorder(spec.capture_layers) if spec.capture_layers else None
        if guesses is not None:
            out = guesses.feed(int(toks[0]), room=texts[0].room())  # never past the window
        else:
            out = handle.forward(state, tokens[:, None],
                                 hidden=hidden, recorder=recorder)
        logits = out.logits[:, -1]  # [k, V]
        emb_sum = _captured(out, recorder, spec, fed, att_rows, pool_sums, emb_sum,
                            slice(n0, n0 + t + 1))
        for i in fed:
            c = cands[i]
            c.n_fed += 1
            if texts[i].n_whole == c.n_fed:
                whole_logits[i] = logits[i]
            if c.end is not None:
                c.next_logits = logits[i]
        if watch is not None and cands[0].end is None:
            # whole characters only: a budget cut would trim the tokens of an unfinished one
            n = texts[0].n_whole or len(texts[0].token_ids)
            if watch(texts[0].token_ids[:n], cands[0].logprobs[:n]):
                cands[0].end, cands[0].next_logits = "refused", logits[0]
        if all(c.end is not None for c in cands):
            break
    if guesses is not None:
        guesses.close()
    rows = _square(att_rows, k, len(spec.capture_layers or ()), dev)  # [k, L, T, T] or None
    for i, c in enumerate(cands):
        c.end = c.end or "budget"
        if c.end == "budget" and texts[i].trim():  # never end mid-character
            c.n_fed = min(c.n_fed, len(texts[i].token_ids))
            c.next_logits = whole_logits.get(i) if c.n_fed == len(texts[i].token_ids) else None
            n = len(texts[i].token_ids)
            del c.logprobs[n:], c.sample_probs[n:], c.top_logprobs[n:]
        c.token_ids, c.text = texts[i].token_ids, texts[i].text
        c.step_rows = rows[i, :, : c.n_fed, : c.n_fed] if rows is not None else None
        if emb_sum is not None:
            c.embedding = emb_sum[i] / max(1, c.n_fed)
        c.pooled = {layer: (sums[i] / max(1, c.n_fed)).cpu() for layer, sums in pool_sums.items()}
    return Proposal(handle, state, cands)


def _captured(out: Forward, recorder: AttentionRecorder | None, spec: SampleSpec, fed: list[int],
              att_rows: list[torch.Tensor], pool_sums: dict[int, torch.Tensor],
              emb_sum: torch.Tensor | None, step_cols: slice) -> torch.Tensor | None:
    """Add one decode step's captures for the rows in `fed`: its attention rows on the step's
    columns `step_cols` (to `att_rows`), the pooled hidden layers (to `pool_sums`); returns the
    grown sum of last hidden states (`emb_sum`)."""
    k = out.logits.shape[0]
    if recorder is not None:
        att = sparsify_rows(recorder.stacked()[:, :, -1], spec.sparsify_threshold)  # [k, L, n]
        att_rows.append(att[:, :, step_cols])
    fed_mask = torch.zeros(k, 1, device=out.logits.device)
    fed_mask[fed] = 1.0
    if out.hidden is not None and spec.hidden:
        h = out.hidden[:, -1].float() * fed_mask  # [k, d]
        emb_sum = h if emb_sum is None else emb_sum + h
    for layer in spec.pool_layers:
        assert out.layers is not None
        h = out.layers[layer][:, -1].float() * fed_mask  # [k, d], rows not fed: 0
        pool_sums[layer] = h if layer not in pool_sums else pool_sums[layer] + h
    return emb_sum


def _square(att_rows: list[torch.Tensor], k: int, n_layers: int, device: torch.device
            ) -> torch.Tensor | None:
    """Step t's rows `[k, L, t + 1]` -> one lower-triangular `[k, L, T, T]` (None: no capture)."""
    if not n_layers:
        return None
    n = len(att_rows)
    out = torch.zeros(k, n_layers, n, n, device=device)
    for t, row in enumerate(att_rows):
        out[:, :, t, : t + 1] = row
    return out
