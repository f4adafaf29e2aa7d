"""A proposal's data: how to sample one step (`SampleSpec`), one sampled step (`Candidate`) and k
of them over a forked cache (`Proposal`: `.keep(i)` commits row i's step, `.discard()` rolls the
cache back to the prefix).

Plain data with no proposing logic: the draft's proposals are made by the engine
(`engine/proposer.py`: `propose`), a served target's steps by `remote/target.py`; both hand back
these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from specguard_core.cache.state import CacheState
from specguard_core.decoding.sampling import NO_SHAPING, Shaping
from specguard_core.text.step_text import EndReason
from specguard_core.text.steps import StepRules

if TYPE_CHECKING:
    from specguard_core.cache.state import Target

__all__ = ["Candidate", "Proposal", "SampleSpec"]


@dataclass(frozen=True)
class SampleSpec:
    """How to sample one step. `capture_layers=None` skips attention capture."""

    k: int
    temperature: float
    top_p: float
    max_tokens: int
    rules: StepRules
    capture_layers: frozenset[int] | None = None
    sparsify_threshold: float = 0.01
    hidden: bool = False
    pool_layers: tuple[int, ...] = ()  # hidden-state layers (0 = embeddings) to mean-pool per step
    shaping: Shaping = NO_SHAPING  # top-k, min-p, repetition penalty (`sampling.Shaping`)
    grace: int = 0  # tokens past max_tokens a step may take to complete its first character
    lookahead: int = 0  # k = 1 without capture: prompt-lookup guesses fed with each token (0: none)
    call_tokens: int = 0  # tokens a step that opens a tool call may take (past max_tokens)
    top_logprobs: int = 0  # the most likely tokens recorded at each position (`Candidate`)


@dataclass
class Candidate:
    """One sampled step. `logprobs: [T]` raw (temperature-1) log-probs of `token_ids`;
    `sample_probs: [T]` each token's probability under the distribution it was drawn from (1.0 when
    greedy; speculative sampling's q); `step_rows: [L, F, F]` sparsified attention rows of the F fed
    tokens on step columns; `embedding: [d]` mean last hidden state over the fed tokens;
    `pooled[layer]: [d]` the mean hidden state of that layer over the fed tokens, for each of
    `SampleSpec.pool_layers`; `top_logprobs: [T]` each position's `SampleSpec.top_logprobs` most
    likely tokens as (id, raw log-probability) (empty when none were asked for)."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    end: EndReason | None = None
    n_fed: int = 0
    next_logits: torch.Tensor | None = None
    step_rows: torch.Tensor | None = None
    embedding: torch.Tensor | None = None
    pooled: dict[int, torch.Tensor] = field(default_factory=dict)
    sample_probs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)

    @property
    def fed(self) -> list[int]:
        """The tokens that went through the model (all but a final EOS)."""
        return self.token_ids[: self.n_fed]


@dataclass
class Proposal:
    """k candidate steps over a forked cache. End it with `keep(i)` or `discard()`."""

    handle: Target
    state: CacheState
    candidates: list[Candidate]

    def keep(self, i: int, n_tokens: int | None = None) -> None:
        """Keep row `i`: commit its fed tokens (or only the first `n_tokens`), drop the other rows."""
        cand = self.candidates[i]
        n = cand.n_fed if n_tokens is None else min(n_tokens, cand.n_fed)
        self.handle.commit_row(self.state, i, cand.token_ids[:n],
                               cand.next_logits if n == cand.n_fed else None)

    def discard(self) -> None:
        """Roll the cache back to the prefix, as if nothing had been proposed."""
        self.handle.drop_uncommitted(self.state)
