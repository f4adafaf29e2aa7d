"""The baselines on a backend other than transformers (`--backend llama.cpp`).

- `llama_greedy`: llama.cpp alone: the target (or the draft) decoding greedily one token per
  `llama_decode`, the token picked by llama.cpp's own greedy sampler from the logits it holds
  (nothing copied out), in the engine's own context of that model (the same threads, KV cache
  and weights' buffers as SpecGuard's runs).
- `token_sd`: the project's own token-level speculative decoding over the engine's models, as
  transformers' assisted generation does it (llama-cpp-python offers draft-model speculation for
  none of its models, only prompt lookup): the draft proposes a run of greedy tokens (5 at first,
  +2 after a fully kept run, -1 otherwise, at most 16), the target checks it in one pass and keeps
  the agreeing prefix and its own next token. Lossless: the target's greedy text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def llama_greedy(handle: Any, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
    """`handle`'s (a `LlamaCppHandle`) greedy continuation of `prompt`, up to `max_new_tokens`
    tokens, an end-of-turn token included."""
    ctx = handle.ctx
    lib, seq = ctx.lib, ctx.acquire()
    sampler = lib.llama_sampler_init_greedy()
    out: list[int] = []
    try:
        ctx.decode([(seq, 0, list(prompt))], all_logits=False, read=False)
        while len(out) < max_new_tokens:
            with ctx.lock:
                tok = int(lib.llama_sampler_sample(sampler, ctx.ctx, -1))
            out.append(tok)
            if tok in handle.eos_ids:
                break
            ctx.decode([(seq, len(prompt) + len(out) - 1, [tok])], all_logits=False, read=False)
    finally:
        lib.llama_sampler_free(sampler)
        ctx.release(seq)
    return out


def token_sd(draft: Any, target: Any, prompt: Sequence[int], max_new_tokens: int,
             first_run: int = 5, max_run: int = 16) -> list[int]:
    """The target's greedy continuation of `prompt` (up to `max_new_tokens`, an end-of-turn token
    included), written by draft runs that the target checks in one pass each."""
    d_state, t_state = draft.new_state(), target.new_state()
    d_state.pending, t_state.pending = list(prompt), list(prompt)
    out: list[int] = []
    run = first_run
    while len(out) < max_new_tokens and not (out and out[-1] in target.eos_ids):
        draft.catch_up(d_state)
        base = len(d_state.ids)
        proposed = _draft_run(draft, d_state, min(run, max_new_tokens - len(out)))
        fed = proposed[:-1] if proposed[-1] in target.eos_ids else proposed
        tpass = target.try_tokens(t_state, fed)
        greedy = tpass.logits.argmax(-1).tolist()  # [T+1]: the target's own token at each place
        kept = next((i for i, t in enumerate(proposed) if greedy[i] != t), len(proposed))
        new = proposed[:kept] if kept == len(proposed) and kept > len(fed) else \
            proposed[:kept] + [greedy[kept]]
        tpass.keep(min(kept, len(fed)))
        t_state.pending += new[min(kept, len(fed)):]
        draft.rollback(d_state, base + min(kept, len(proposed) - 1))
        d_state.pending += new[min(kept, len(proposed) - 1):]
        run = min(max_run, run + 2) if kept == len(proposed) else max(1, run - 1)
        out += new
    return out[:max_new_tokens]


def _draft_run(draft: Any, state: Any, n: int) -> list[int]:
    """Up to `n` greedy draft tokens after `state` (stopping at an end-of-turn token); all but
    the last are fed and committed."""
    toks: list[int] = []
    logits = draft.next_logits(state)
    for j in range(max(1, n)):
        tok = int(logits.argmax())
        toks.append(tok)
        if tok in draft.eos_ids or j == n - 1:
            break
        logits = draft.extend(state, [tok]).logits[0, -1]
    return toks
