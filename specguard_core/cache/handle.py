"""A model handle: HF model + tokenizer, and the one place where KV caches are extended, forked,
rolled back and caught up.

The cache protocol, by name: `catch_up` encodes tokens committed elsewhere; `fork` repeats the
prefix row for a batched proposal and `commit_row` / `drop_uncommitted` end it (keep one row's
tokens, or return to the prefix); `try_tokens` feeds tokens without committing them and returns a
`TentativePass` whose `.keep(n)` / `.discard()` commit a prefix of them or roll them back;
`gather_rows` / `scatter_rows` lend several requests' caches to one padded forward
(`concurrency/padded.py`) and hand each request its new positions back (the tensor copying lives
in `cache/batching.py`).

Per-request state lives in `CacheState` (the cache of the committed prefix, its token ids, the
next-token logits and the token counters), so one handle serves many requests.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from specguard_core.cache import batching, capture
from specguard_core.cache.batching import cache_rows
from specguard_core.cache.state import CacheState, Forward, TentativePass, local_cache
from specguard_core.concurrency.cpu_runner import Runner


class ModelHandle:
    """Wraps one causal LM. `name` is for traces; `eos_ids` end generation."""

    def __init__(self, model: Any, tokenizer: Any, name: str = "",
                 runner: Runner | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        # forwards run on this thread when given (an engine's, for CPU models: `concurrency/cpu_runner.py`)
        self.runner = runner
        self.name = name or str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
        capture.install(model)
        gen = getattr(model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None) if gen is not None else None
        eos_list = eos if isinstance(eos, list) else [eos]
        self.eos_ids = frozenset(int(e) for e in eos_list + [tokenizer.eos_token_id] if e is not None)
        text_cfg = model.config.get_text_config()
        self.context_window = int(getattr(text_cfg, "max_position_embeddings", 0) or 0)
        self.device = next(model.parameters()).device
        # transformers >= 5.24 names the cache argument `cache`; earlier 5.x `past_key_values`
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    def new_state(self) -> CacheState:
        return CacheState(cache=DynamicCache(config=self.model.config))

    @torch.inference_mode()
    def forward(self, state: CacheState, input_ids: torch.Tensor, *, all_logits: bool = False,
                hidden: bool = False, recorder: capture.AttentionRecorder | None = None,
                tentative: bool = False) -> Forward:
        """Feed `input_ids: [b, q]` after what `state.cache` holds; counts prefilled, decoded or
        (for a verification pass) tentative tokens. Runs on `runner`'s thread when there is one."""
        if self.runner is not None and not self.runner.here():
            return self.runner.run(self.forward, state, input_ids, all_logits=all_logits,
                                   hidden=hidden, recorder=recorder, tentative=tentative)
        b, q = input_ids.shape
        extra: dict[str, Any] = {self._cache_arg: local_cache(state)}
        if recorder is not None:
            extra["specguard_recorder"] = recorder
        out = self.model(input_ids=input_ids.to(self.device),
                         use_cache=True, logits_to_keep=0 if all_logits else 1,
                         output_hidden_states=hidden, **extra)
        count_forward(state, b, q, tentative)
        last = out.hidden_states[-1] if hidden else None
        return Forward(out.logits.float(), last, tuple(out.hidden_states) if hidden else None)

    @torch.inference_mode()
    def forward_padded(self, cache: DynamicCache, input_ids: torch.Tensor,
                       attention_mask: torch.Tensor, position_ids: torch.Tensor,
                       logits_to_keep: torch.Tensor, *, hidden: bool = False,
                       recorder: capture.AttentionRecorder | None = None) -> Forward:
        """One forward over a padded batch (see `concurrency/padded.py`): `input_ids: [b, Q]` after
        `cache` (W positions per row), `attention_mask: [b, W + Q]` (1 = a real token),
        `position_ids: [b, Q]`, `logits_to_keep` as transformers reads it (`[b, k]` positions per
        row, or a `[b, Q]` bool mask whose logits come back flattened to `[sum, V]`). Hidden
        states and recorded attention rows cover all `[b, Q]` (resp. `[b, Q, W + Q]`) positions,
        pads included; counters are the caller's (they are per request). Runs on `runner`'s
        thread when there is one."""
        if self.runner is not None and not self.runner.here():
            return self.runner.run(self.forward_padded, cache, input_ids, attention_mask,
                                   position_ids, logits_to_keep, hidden=hidden, recorder=recorder)
        extra: dict[str, Any] = {self._cache_arg: cache}
        if recorder is not None:
            extra["specguard_recorder"] = recorder
        out = self.model(input_ids=input_ids.to(self.device),
                         attention_mask=attention_mask.to(self.device),
                         position_ids=position_ids.to(self.device),
                         use_cache=True, logits_to_keep=logits_to_keep.to(self.device),
                         output_hidden_states=hidden, **extra)
        layers = tuple(out.hidden_states) if hidden else None
        return Forward(out.logits.float(), layers[-1] if layers else None, layers)

    def batch_problem(self, state: CacheState, rows: int | None = 1) -> str | None:
        """Why `state` cannot join a padded forward with `rows` rows of new tokens (None: any),
        or None when it can (`batching.batch_problem`)."""
        return batching.batch_problem(state, self.name, rows)

    def check_batchable(self, state: CacheState, rows: int | None = 1) -> None:
        """Raise ValueError with `batch_problem`'s reason unless `state` can be batched."""
        if problem := self.batch_problem(state, rows):
            raise ValueError(problem)

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
        state.counters.discarded += _crop(local_cache(state), n_tokens)
        if n_tokens < len(state.ids):
            del state.ids[n_tokens:]
            state.logits = None

    def crop_uncommitted(self, state: CacheState, n_tokens: int) -> None:
        """Keep the committed prefix and the first `n_tokens` positions fed after it (a proposal's
        fed tokens) in the cache; forget the positions after them (guesses the draft did not
        pick: `decoding/guesses.py`)."""
        state.counters.discarded += _crop(local_cache(state), len(state.ids) + n_tokens)

    def fork(self, state: CacheState, k: int) -> None:
        """Repeat the single cache row `k` times for a batched proposal."""
        if k > 1:
            local_cache(state).batch_repeat_interleave(k)

    def commit_row(self, state: CacheState, row: int, new_ids: list[int],
                   logits: torch.Tensor | None) -> None:
        """End a proposal: keep cache row `row` and commit its first `len(new_ids)` step tokens;
        the rest of the row is cropped. `logits` predict the token after them when all of them were
        fed, else None (stale)."""
        cache = local_cache(state)
        if cache_rows(cache) > 1:
            cache.batch_select_indices(torch.tensor([row], device=self.device))
        state.counters.discarded += _crop(cache, len(state.ids) + len(new_ids))
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
        held = local_cache(tpass.state).get_seq_length()
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

    def gather_rows(self, states: Sequence[CacheState]) -> DynamicCache:
        """The states' cache rows as one left-padded batched cache for a padded forward; their
        own caches unchanged (`batching.gather_rows`)."""
        return batching.gather_rows(states, self.model.config, self.name)

    def scatter_rows(self, batched: DynamicCache, states: Sequence[CacheState], start: int,
                     lengths: Sequence[int]) -> None:
        """After a padded forward on `gather_rows(states)`: append each state's new positions
        `start : start + lengths[i]` to its cache (`batching.scatter_rows`)."""
        batching.scatter_rows(batched, states, start, lengths, self.name)

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


def _crop(cache: DynamicCache, n_tokens: int) -> int:
    """Keep the first `n_tokens` positions (transformers 5 `crop` takes a negative count); returns
    how many positions were dropped."""
    extra = cache.get_seq_length() - n_tokens
    if extra > 0:
        cache.crop(-extra)
    return max(0, extra)
