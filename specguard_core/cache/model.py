"""The model seam: `CachedModel`, what the step loop, the checks and the fallbacks call on an
in-process model, whatever runs it, and the one place its cache is extended, caught up, rolled
back and tried.

A backend subclasses it with four primitives over its own KV cache: `forward` (feed tokens after
what the cache holds), `held` (positions the cache holds), `crop` (keep the first n of them),
`fork` / `keep_row` (k rows of a proposal, then one). Two backends implement it:
`cache/handle.py` (`ModelHandle`: Hugging Face `transformers`) and `llamacpp/handle.py`
(`LlamaCppHandle`: llama.cpp through `llama-cpp-python`). What a backend can give besides logits
is declared, so a request that needs more is refused when it opens (`engine/judge.py`, making its
plan):
`attention` (attention rows of chosen layers, for grounding) and `hidden_layers` (every layer's
hidden states, for a verifier card); every backend gives the last hidden state when asked.

Per-request state lives in `CacheState` (the cache of the committed prefix, its token ids, the
next-token logits and the token counters), so one model serves many requests.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from specguard_core.cache import capture
from specguard_core.cache.state import CacheState, Forward, TentativePass


class CachedModel:
    """One causal LM and its tokenizer: `name` for traces, `eos_ids` end generation,
    `context_window` positions (0: unknown), `vocab_width` the width of its logits rows."""

    backend: ClassVar[str]
    attention: ClassVar[bool] = False  # attention rows of chosen layers (`capture`)
    hidden_layers: ClassVar[bool] = False  # every layer's hidden states (`Forward.layers`)
    # prompt-lookup guesses a draft forward feeds by default (`draft_lookahead=None`): what paid
    # on this backend's forward-cost curve (docs/decisions/0020-guesses-by-backend.md)
    guesses: ClassVar[int]
    tokenizer: Any
    name: str
    eos_ids: frozenset[int]
    context_window: int
    device: torch.device

    # ---- the backend's primitives ---------------------------------------------------------
    def new_state(self) -> CacheState:
        raise NotImplementedError

    def forward(self, state: CacheState, input_ids: torch.Tensor, *, all_logits: bool = False,
                hidden: bool = False, recorder: capture.AttentionRecorder | None = None,
                tentative: bool = False) -> Forward:
        """Feed `input_ids: [b, q]` (b: the rows the cache holds) after what the cache holds;
        logits of the last position (all of them with `all_logits`), hidden states when asked;
        counts prefilled, decoded or (a verification pass) tentative tokens."""
        raise NotImplementedError

    def held(self, state: CacheState) -> int:
        """Positions the cache holds: the committed prefix and what was fed after it."""
        raise NotImplementedError

    def crop(self, state: CacheState, n_tokens: int) -> int:
        """Keep the first `n_tokens` positions of the cache (every row); how many were dropped."""
        raise NotImplementedError

    def fork(self, state: CacheState, k: int) -> None:
        """Repeat the single cache row `k` times for a batched proposal."""
        raise NotImplementedError

    def keep_row(self, state: CacheState, row: int) -> None:
        """Keep cache row `row` of a forked proposal as the only row."""
        raise NotImplementedError

    @property
    def vocab_width(self) -> int:
        """The width of the logits rows (an lm_head may be padded past the tokenizer)."""
        return len(self.tokenizer)

    # ---- the cache protocol over them ------------------------------------------------------
    def extend(self, state: CacheState, ids: list[int], **kwargs: Any) -> Forward | None:
        """Catch-up: encode `ids` after the committed prefix and commit them."""
        if not ids:
            return None
        out = self.forward(state, torch.tensor([ids]), **kwargs)
        state.ids.extend(ids)
        state.logits = out.logits[0, -1]
        return out

    def catch_up(self, state: CacheState) -> None:
        """Encode the tokens committed since this model last ran (one prefill, never the whole
        context again)."""
        pending, state.pending = state.pending, []
        self.extend(state, pending)

    def next_logits(self, state: CacheState) -> torch.Tensor:
        """Logits after the committed prefix, re-feeding the last token if they went stale."""
        if state.logits is None:
            last = state.ids[-1]
            self.rollback(state, len(state.ids) - 1)
            self.extend(state, [last])
        assert state.logits is not None
        return state.logits

    def rollback(self, state: CacheState, n_tokens: int) -> None:
        """Forget everything after the first `n_tokens` committed tokens."""
        state.counters.discarded += self.crop(state, n_tokens)
        if n_tokens < len(state.ids):
            del state.ids[n_tokens:]
            state.logits = None

    def crop_uncommitted(self, state: CacheState, n_tokens: int) -> None:
        """Keep the committed prefix and the first `n_tokens` positions fed after it (a proposal's
        fed tokens) in the cache; forget the positions after them (guesses the draft did not
        pick: `decoding/guesses.py`)."""
        state.counters.discarded += self.crop(state, len(state.ids) + n_tokens)

    def commit_row(self, state: CacheState, row: int, new_ids: list[int],
                   logits: torch.Tensor | None) -> None:
        """End a proposal: keep cache row `row` and commit its first `len(new_ids)` step tokens;
        the rest of the row is cropped. `logits` predict the token after them when all of them were
        fed, else None (stale)."""
        self.keep_row(state, row)
        state.counters.discarded += self.crop(state, len(state.ids) + len(new_ids))
        state.ids.extend(new_ids)
        state.logits = logits

    def drop_uncommitted(self, state: CacheState) -> None:
        """Roll the cache back to the committed prefix (one row), keeping its next-token logits."""
        self.commit_row(state, 0, [], state.logits)

    def try_tokens(self, state: CacheState, ids: list[int], *,
                   recorder: capture.AttentionRecorder | None = None,
                   hidden: bool = False) -> TentativePass:
        """Feed the pending tokens (committed here) and then `ids` (not committed) in one pass.

        The pass's `logits: [T+1, V]` row i predicts `ids[i]`, row T the token after all of them."""
        pending, state.pending = state.pending, []
        if not pending:
            first = self.next_logits(state)[None]  # [1, V] predicts ids[0]
            if not ids:
                return TentativePass(self, state, [], first, None)
        out = self.forward(state, torch.tensor([pending + ids]), all_logits=True,
                           recorder=recorder, tentative=True, hidden=hidden)
        rows = out.logits[0]  # [P+T, V]
        if pending:
            state.ids.extend(pending)
            state.logits = rows[len(pending) - 1]
            logits = rows[len(pending) - 1:]  # [T+1, V]
        else:
            logits = torch.cat([first, rows])  # [T+1, V]
        return TentativePass(self, state, list(ids), logits, out)

    def try_more(self, tpass: TentativePass, ids: list[int]) -> None:
        """Grow the tentative pass `tpass` by `ids` in one forward (see `TentativePass.extend`)."""
        if not ids:
            return
        held = self.held(tpass.state)
        if held != len(tpass.state.ids) + len(tpass.ids):
            raise ValueError(f"this pass's cache holds {held} positions, not its "
                             f"{len(tpass.state.ids)} committed + {len(tpass.ids)} tentative "
                             "tokens: a pass can only grow right after it was made or grown")
        out = self.forward(tpass.state, torch.tensor([ids]), all_logits=True, tentative=True)
        tpass.ids = tpass.ids + list(ids)
        tpass.logits = torch.cat([tpass.logits, out.logits[0]])  # [T+T'+1, V]

    def unwind(self, state: CacheState, n_tokens: int) -> None:
        """Forget the last `n_tokens` committed tokens, the pending (not yet encoded) ones first."""
        drop = min(n_tokens, len(state.pending))
        del state.pending[len(state.pending) - drop:]
        if n_tokens > drop:
            self.rollback(state, len(state.ids) - (n_tokens - drop))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))


def count_forward(state: CacheState, rows: int, tokens: int, tentative: bool) -> None:
    """Count one forward of `rows` x `tokens` new tokens for `state`: tentative (a verification
    pass), prefilled (more than one token a row) or decoded."""
    if tentative:
        state.counters.tentative += rows * tokens
    elif tokens > 1:
        state.counters.prefilled += rows * tokens
    else:
        state.counters.decoded += rows
    state.counters.forward_calls += 1
