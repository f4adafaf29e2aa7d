"""`LlamaCppHandle`: the llama.cpp backend of the model seam (`cache/model.py`).

A request's cache is a `Sequences`: sequence ids of the model's shared llama.cpp context
(`context.py`), the first holding the committed prefix and what was fed after it, the others a
forked proposal's rows (which share the prefix's KV cells). Rolling back is
`llama_memory_seq_rm`, forking `llama_memory_seq_cp`. llama.cpp returns logits and, when asked,
the final hidden state; attention rows and middle layers it does not expose (`attention`,
`hidden_layers` are False), so a request that needs them is refused when it opens. The text side
(chat template, ids to text) is the Hugging Face tokenizer of the same GGUF, whose ids are
llama.cpp's.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from specguard_core.cache import capture
from specguard_core.cache.model import CachedModel, count_forward
from specguard_core.cache.state import CacheState, Forward
from specguard_core.llamacpp.context import LlamaContext


@dataclass
class Sequences:
    """One request's sequences in `ctx`: `ids[0]` its own, `ids[1:]` a forked proposal's other
    rows; `n` positions held by every row. Released to the context when dropped."""

    ctx: LlamaContext
    ids: list[int] = field(default_factory=list)
    n: int = 0

    def __post_init__(self) -> None:
        self.ids = self.ids or [self.ctx.acquire()]
        weakref.finalize(self, _release, self.ctx, self.ids)


def _release(ctx: LlamaContext, ids: list[int]) -> None:
    for seq in ids:
        ctx.release(seq)


class LlamaCppHandle(CachedModel):
    """A GGUF model run by llama.cpp (`ctx`) with `tokenizer`, the Hugging Face tokenizer of the
    same vocabulary."""

    backend = "llama.cpp"
    guesses = 3  # a forward over n tokens costs more with every n on its CPU kernels

    def __init__(self, ctx: LlamaContext, tokenizer: Any, name: str = "") -> None:
        self.ctx, self.tokenizer, self.name = ctx, tokenizer, name or "gguf"
        eos = tokenizer.eos_token_id
        self.eos_ids = frozenset(ctx.eog | ({int(eos)} if eos is not None else set()))
        self.context_window = min(ctx.n_ctx_train, ctx.n_ctx)
        self.device = torch.device("cpu")
        self.runner = None  # llama.cpp runs its own threads

    @property
    def vocab_width(self) -> int:
        return self.ctx.n_vocab

    def new_state(self) -> CacheState:
        return CacheState(cache=Sequences(self.ctx))

    def forward(self, state: CacheState, input_ids: torch.Tensor, *, all_logits: bool = False,
                hidden: bool = False, recorder: capture.AttentionRecorder | None = None,
                tentative: bool = False) -> Forward:
        if recorder is not None:
            raise ValueError("the llama.cpp backend gives no attention rows (grounding needs "
                             "the transformers backend)")
        seqs = _seqs(state)
        b, q = input_ids.shape
        if b != len(seqs.ids):
            raise ValueError(f"{b} rows of tokens for a cache of {len(seqs.ids)} row(s)")
        rows = [(seq, seqs.n, toks) for seq, toks in zip(seqs.ids, input_ids.tolist(), strict=True)]
        out = self.ctx.decode(rows, all_logits, hidden)
        assert out is not None
        seqs.n += q
        count_forward(state, b, q, tentative)
        width = q if all_logits else 1
        last = None if out.hidden is None else out.hidden.view(b, width, -1)
        return Forward(out.logits.view(b, width, -1), last)  # [b, q or 1, V]

    def held(self, state: CacheState) -> int:
        return _seqs(state).n

    def crop(self, state: CacheState, n_tokens: int) -> int:
        seqs = _seqs(state)
        extra = seqs.n - n_tokens
        if extra > 0:
            for seq in seqs.ids:
                self.ctx.remove(seq, n_tokens)
            seqs.n = n_tokens
        return max(0, extra)

    def fork(self, state: CacheState, k: int) -> None:
        seqs = _seqs(state)
        for _ in range(k - 1):
            seq = self.ctx.acquire()
            seqs.ids.append(seq)
            self.ctx.copy(seqs.ids[0], seq)

    def keep_row(self, state: CacheState, row: int) -> None:
        seqs = _seqs(state)
        if row:
            self.ctx.copy(seqs.ids[row], seqs.ids[0])
        while len(seqs.ids) > 1:
            self.ctx.release(seqs.ids.pop())


def _seqs(state: CacheState) -> Sequences:
    assert isinstance(state.cache, Sequences), "this state belongs to another model"
    return state.cache
