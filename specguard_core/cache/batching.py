"""The KV-cache side of a padded forward (`concurrency/padded.py`): whether a request's state can
join one (`batch_problem`), several states' cache rows copied into one left-padded batched cache
(`gather_rows`), and each state's new positions appended back to its own cache (`scatter_rows`).

`ModelHandle` offers these as methods; extending, forking, rolling back and catching up a
request's cache stay in `cache/handle.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from specguard_core.cache.state import CacheState, local_cache


def cache_rows(cache: DynamicCache) -> int:
    """The rows (batch size) the cache holds; 1 while it is empty."""
    keys = getattr(cache.layers[0], "keys", None) if cache.layers else None
    return int(keys.shape[0]) if keys is not None and keys.numel() else 1


def batch_problem(state: CacheState, name: str, rows: int | None = 1) -> str | None:
    """Why `state` (of the model `name`) cannot join a padded forward with `rows` rows of new
    tokens (None: any), or None when it can: a local cache of full-attention layers holding that
    many rows (1, or a forked proposal's k)."""
    if state.cache is None:
        return "a served target's state has no local cache to batch"
    held = cache_rows(state.cache)
    if rows is not None and held != rows:
        return (f"this state's cache holds {held} row(s) but {rows} row(s) of new tokens were "
                "given: feed one row per cache row (a proposal's forked cache rows take k), "
                "or end the proposal with commit_row / drop_uncommitted first")
    if any(type(layer) is not DynamicLayer for layer in state.cache.layers):
        return (f"{name}: batched forwards support full-attention caches only (this "
                "model has sliding-window or other special cache layers)")
    return None


def gather_rows(states: Sequence[CacheState], config: Any, name: str) -> DynamicCache:
    """A new batched cache (for the model `name` of `config`) for one padded forward: `states[i]`'s
    cache rows (1, or a forked proposal's k) become consecutive rows, left-padded with zeros to the
    longest state's length W (`get_seq_length()` of the result). The states' own caches are not
    changed (their tensors are copied); `scatter_rows` hands them the positions the forward
    appends. Raises ValueError for a served or sliding-window cache."""
    for state in states:
        if problem := batch_problem(state, name, rows=None):
            raise ValueError(problem)
    caches = [_full_layers(local_cache(s), name) for s in states]
    batched = DynamicCache(config=config)
    lengths = [c[0].get_seq_length() for c in caches]
    counts = [cache_rows(local_cache(s)) for s in states]
    width = max(lengths, default=0)
    if width == 0:
        return batched
    for idx, layer in enumerate(_full_layers(batched, name)):
        src = [_tensors(c[idx]) if n else None for c, n in zip(caches, lengths, strict=True)]
        like = next(kv[0] for kv in src if kv is not None)  # [r, h, n, d]
        keys = like.new_zeros(sum(counts), like.shape[1], width, like.shape[3])  # [b, h, W, d]
        values = torch.zeros_like(keys)
        row = 0
        for kv, r in zip(src, counts, strict=True):
            if kv is not None:
                keys[row:row + r, :, width - kv[0].shape[2]:] = kv[0]
                values[row:row + r, :, width - kv[1].shape[2]:] = kv[1]
            row += r
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
    return batched


def scatter_rows(batched: DynamicCache, states: Sequence[CacheState], start: int,
                 lengths: Sequence[int], name: str) -> None:
    """After a padded forward on `gather_rows(states)` (W = `start` positions per row): append
    positions `start : start + lengths[i]` of `states[i]`'s rows of `batched` (its new tokens)
    to its cache, as if the forward had run on that state alone. Counters are the caller's."""
    layers = _full_layers(batched, name)
    row = 0
    for state, n in zip(states, lengths, strict=True):
        cache = local_cache(state)
        r = cache_rows(cache)
        for idx, layer in enumerate(layers):
            keys, values = _tensors(layer)  # [b, h, W + Q, d]
            cache.update(keys[row:row + r, :, start:start + n],
                         values[row:row + r, :, start:start + n], idx)
        row += r


def _full_layers(cache: DynamicCache, name: str) -> list[DynamicLayer]:
    layers = list(cache.layers)
    if any(type(layer) is not DynamicLayer for layer in layers):
        raise ValueError(f"{name}: batched forwards support full-attention caches only (this "
                         "model has sliding-window or other special cache layers)")
    return cast(list[DynamicLayer], layers)


def _tensors(layer: DynamicLayer) -> tuple[torch.Tensor, torch.Tensor]:
    assert layer.keys is not None and layer.values is not None, "an uninitialized cache layer"
    return layer.keys, layer.values
