"""`ModelHandle`: the `transformers` backend of the model seam (`cache/model.py`): a Hugging Face
causal LM and tokenizer over a `DynamicCache` per request.

Its primitives are `CachedModel`'s (`forward`, `held`, `crop`, `fork`, `keep_row`), and for
batching `gather_rows` / `scatter_rows` lend several requests' caches to one padded forward
(`concurrency/padded.py`) and hand each request its new positions back (the tensor copying lives
in `cache/batching.py`). It can capture attention rows (`attention`) and return every layer's
hidden states (`hidden_layers`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import torch
from transformers import DynamicCache

from specguard_core.cache import batching, capture
from specguard_core.cache.batching import cache_rows
from specguard_core.cache.model import CachedModel, count_forward
from specguard_core.cache.state import CacheState, Forward, local_cache

T = TypeVar("T")


class ForwardRunner(Protocol):
    """The thread a handle's forwards run on (an engine's `concurrency/cpu_runner.Runner`)."""

    def here(self) -> bool: ...

    def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T: ...


class ModelHandle(CachedModel):
    """Wraps one transformers causal LM. `name` is for traces; `eos_ids` end generation."""

    backend = "transformers"
    attention = True
    hidden_layers = True
    guesses = 8  # a forward over 9 tokens costs about one over 1 in bf16

    def __init__(self, model: Any, tokenizer: Any, name: str = "",
                 runner: ForwardRunner | None = None) -> None:
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

    def fork(self, state: CacheState, k: int) -> None:
        """Repeat the single cache row `k` times for a batched proposal."""
        if k > 1:
            local_cache(state).batch_repeat_interleave(k)

    def keep_row(self, state: CacheState, row: int) -> None:
        cache = local_cache(state)
        if cache_rows(cache) > 1:
            cache.batch_select_indices(torch.tensor([row], device=self.device))

    def held(self, state: CacheState) -> int:
        return int(local_cache(state).get_seq_length())

    def crop(self, state: CacheState, n_tokens: int) -> int:
        """Keep the first `n_tokens` positions (transformers 5 `crop` takes a negative count)."""
        cache = local_cache(state)
        extra = cache.get_seq_length() - n_tokens
        if extra > 0:
            cache.crop(-extra)
        return max(0, extra)

    @property
    def vocab_width(self) -> int:
        return max(int(getattr(self.model.config.get_text_config(), "vocab_size", 0) or 0),
                   len(self.tokenizer))

    def gather_rows(self, states: Sequence[CacheState]) -> DynamicCache:
        """The states' cache rows as one left-padded batched cache for a padded forward; their
        own caches unchanged (`batching.gather_rows`)."""
        return batching.gather_rows(states, self.model.config, self.name)

    def scatter_rows(self, batched: DynamicCache, states: Sequence[CacheState], start: int,
                     lengths: Sequence[int]) -> None:
        """After a padded forward on `gather_rows(states)`: append each state's new positions
        `start : start + lengths[i]` to its cache (`batching.scatter_rows`)."""
        batching.scatter_rows(batched, states, start, lengths, self.name)
