"""The target seam: what the step loop and the fallbacks call on the target model.

Two implementations: `ModelHandle` (an in-process transformers model and its KV cache, as is) and
`RemoteTarget` (`remote.py`: a model on a vLLM server, reached over its OpenAI-compatible API).
The loop never asks which one it has, except for what only an in-process model can give
(attention rows and hidden states for `scoring_model="target"`, checked up front).

A target writes a rejected step with `write_step`: an in-process model through `proposer.propose`
(one forward per token over its forked cache), a served model with its own generation endpoint (a
`StepWriter`: one request per step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

from specguard_core.engine.capture import AttentionRecorder
from specguard_core.engine.handle import CacheState, Forward, ModelHandle, TentativePass
from specguard_core.engine.proposer import Proposal, SampleSpec, propose


@runtime_checkable
class Target(Protocol):
    """The target as the loop and fallbacks use it (`commit_row`/`drop_uncommitted` through
    `TentativePass` and `Proposal`; `tokenizer`/`eos_ids`/`decode` through `StepText`). State per
    request lives in a `CacheState` (`ids` committed and encoded, `pending` committed but not yet
    encoded, `counters`); the contracts are `ModelHandle`'s (see `handle.py`)."""

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
    assert isinstance(target, ModelHandle), f"{type(target).__name__} cannot write steps"
    return propose(target, state, spec, generator, prior, check=check)
