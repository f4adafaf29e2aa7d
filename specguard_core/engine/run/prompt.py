"""The prompt scored by the target (`prompt_logprobs`): its one pass over the prompt, which also
encodes it, so the request's first target pass does not encode it again."""

from __future__ import annotations

from specguard_core.cache.state import CacheState, Target
from specguard_core.decoding.logprobs import token_scores
from specguard_core.types import PromptLogprobs


def score_prompt(target: Target, state: CacheState, top: int) -> PromptLogprobs:
    """The prompt pending in `state` (a fresh request's target state) fed in one pass and
    committed: each token's raw log-probability given the tokens before it, and the `top` most
    likely tokens at each position (none for the first token, which nothing predicts)."""
    ids = list(state.pending)
    state.pending = ids[:1]  # committed by the pass, which then predicts every later token
    tpass = target.try_tokens(state, ids[1:])  # logits [P, V]: row i predicts ids[i + 1]
    lps, tops = token_scores(tpass.logits, ids[1:], top)
    tpass.keep(len(ids) - 1)
    first: list[float | None] = [None]
    return PromptLogprobs(ids, first + list(lps), [[]] + tops)
