"""The cache types every model seam shares: `CacheState` (one request's committed prefix as one
model has encoded it; `local_cache` gives its in-process KV cache), `Forward` (what a forward
returns), `TentativePass` (tokens fed but not committed) and `Target`, the protocol the step loop
and the fallbacks call on the target model.

In-process models implement it through `CachedModel` (`cache/model.py`: `ModelHandle` on
transformers, `LlamaCppHandle` on llama.cpp), and `RemoteTarget` (`remote/target.py`: a model on
a vLLM server) directly. The loop never asks which one it has; what only some can give
(attention rows, hidden states) is refused when a request opens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from transformers import DynamicCache

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.types import ModelCounters


@dataclass
class CacheState:
    """The committed prefix as one model has encoded it. Invariant outside a proposal: one cache row
    holding exactly `ids`; `logits` ([V], float32) predicts the token after `ids`, or None if stale."""

    # the backend's KV cache of this request: a transformers `DynamicCache`, a llama.cpp handle's
    # `Sequences`; None for a served target (its server caches the prefix)
    cache: Any
    ids: list[int] = field(default_factory=list)
    logits: torch.Tensor | None = None
    counters: ModelCounters = field(default_factory=ModelCounters)
    pending: list[int] = field(default_factory=list)  # committed elsewhere, not yet encoded here


def local_cache(state: CacheState) -> DynamicCache:
    """`state`'s transformers KV cache."""
    assert isinstance(state.cache, DynamicCache), "this state belongs to another backend's model"
    return state.cache


@dataclass
class Forward:
    logits: torch.Tensor  # [b, q, V] float32 (q = 1 unless all positions were asked for)
    hidden: torch.Tensor | None  # [b, q, d] last hidden state, when asked for
    # every layer's hidden states when asked for: index 0 = embeddings, i = after block i
    layers: tuple[torch.Tensor, ...] | None = None  # each [b, q, d]

    def position(self, i: int) -> Forward:
        """This forward as if it had fed positions up to `i` only: what position `i` gives
        (logits `[b, 1, V]`, hidden states `[b, 1, d]`)."""
        def at(x: torch.Tensor) -> torch.Tensor:
            return x[:, i:i + 1]
        return Forward(at(self.logits), None if self.hidden is None else at(self.hidden),
                       None if self.layers is None else tuple(at(h) for h in self.layers))


@dataclass
class TentativePass:
    """Tokens fed after the committed prefix but not committed: `logits: [T+1, V]` (float32), row i
    predicting `ids[i]`, row T the token after all of them. End it with `keep` or `discard`."""

    handle: Target
    state: CacheState
    ids: list[int]
    logits: torch.Tensor  # [T+1, V]
    forward: Forward | None  # None when nothing was fed

    def keep(self, n_tokens: int) -> None:
        """Commit the first `n_tokens` of `ids`; roll the rest back."""
        self.handle.commit_row(self.state, 0, self.ids[:n_tokens], self.logits[n_tokens])

    def discard(self) -> None:
        """Roll all of `ids` back: the cache holds the committed prefix again."""
        self.handle.drop_uncommitted(self.state)

    def extend(self, ids: list[int]) -> None:
        """Feed `ids` after this pass's tokens, still uncommitted (a handle with `try_more`: an
        in-process model or a served target): `ids` and `logits` grow as if one pass had fed
        all of them."""
        try_more = getattr(self.handle, "try_more", None)
        if try_more is None:
            raise TypeError(f"{type(self.handle).__name__} passes cannot be extended")
        try_more(self, ids)


@runtime_checkable
class Target(Protocol):
    """The target as the loop and fallbacks use it (`commit_row`/`drop_uncommitted` through
    `TentativePass` and `Proposal`; `tokenizer`/`eos_ids`/`decode` through `StepText`). State per
    request lives in a `CacheState` (`ids` committed and encoded, `pending` committed but not yet
    encoded, `counters`); the contracts are `CachedModel`'s (see `cache/model.py`)."""

    name: str
    tokenizer: Any
    eos_ids: frozenset[int]
    context_window: int

    def new_state(self) -> CacheState: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def catch_up(self, state: CacheState) -> None: ...

    def extend(self, state: CacheState, ids: list[int]) -> Forward | None: ...

    def try_tokens(self, state: CacheState, ids: list[int], *,
                   recorder: AttentionRecorder | None = None,
                   hidden: bool = False) -> TentativePass: ...

    def commit_row(self, state: CacheState, row: int, new_ids: list[int],
                   logits: torch.Tensor | None) -> None: ...

    def drop_uncommitted(self, state: CacheState) -> None: ...

    def unwind(self, state: CacheState, n_tokens: int) -> None: ...
