"""One forward of a model over several requests' rows: the layer a batching scheduler builds on.

Each request keeps its own single-row `CacheState`. `forward_rows` lends those caches to one padded
forward and hands each request its new positions back, so afterwards every state is as if its
tokens had been fed alone:

    columns:  [ left pad | cached prefix of row i ][ new tokens of row i | right pad ]
              <------------- W = longest cache ----><----------- Q = most new tokens ----->

A 2-D attention mask hides the pads and explicit position ids put row i's new tokens at
`len(cache_i) + j`; transformers combines the mask with causality by column, so a row sees exactly
its own tokens. Right padding of the new tokens keeps every query row unmasked somewhere (a pad
query sees its row's real tokens), so SDPA never meets a fully masked row. Logits are projected only
for the positions asked for (`logits_to_keep` per row), never for the pads.

`extend_rows` and `try_rows` are the batched `ModelHandle.extend` / `ModelHandle.try_tokens`.
The cache copying lives in `ModelHandle.gather_rows` / `scatter_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specguard_core.engine.handle import CacheState, Forward, ModelHandle, TentativePass

PAD_ID = 0  # any valid token id: pad columns are masked out and their outputs dropped


def forward_rows(handle: ModelHandle, states: Sequence[CacheState],
                 new_ids: Sequence[Sequence[int]], *, all_logits: bool = False,
                 tentative: bool = False) -> list[torch.Tensor]:
    """Feed `new_ids[i]` after what `states[i].cache` holds, for every i, in one forward.

    Returns one float32 tensor per row: `[V]` predicting the token after row i's new tokens, or with
    `all_logits` `[len(new_ids[i]), V]` (position j predicts the token after `new_ids[i][j]`).
    Each cache grows by its row's tokens; `ids`/`logits` are not touched (this is
    `ModelHandle.forward` for many states). Counters count per request as a solo forward would.
    Raises ValueError for no rows, mismatched lengths, an empty row, or a cache that cannot be
    batched (forked, served, sliding-window)."""
    if not states:
        raise ValueError("forward_rows: no rows given (pass at least one state and its new ids)")
    if len(states) != len(new_ids):
        raise ValueError(f"forward_rows: {len(states)} states but {len(new_ids)} lists of new ids;"
                         " pass one list of new token ids per state")
    if len({id(s) for s in states}) != len(states):
        raise ValueError("forward_rows: the same state appears twice; give each request one row")
    lengths = [len(ids) for ids in new_ids]
    if min(lengths) == 0:
        raise ValueError(f"forward_rows: row {lengths.index(0)} has no new tokens; leave it out")
    cache = handle.gather_rows(states)  # [b, h, W, d] per layer, rows left-padded
    width, q = cache.get_seq_length(), max(lengths)
    past = [s.cache.get_seq_length() if s.cache is not None else 0 for s in states]

    rows = len(states)
    input_ids = torch.full((rows, q), PAD_ID, dtype=torch.long)  # [b, Q] right-padded
    mask = torch.zeros(rows, width + q, dtype=torch.long)  # [b, W + Q]
    positions = torch.zeros(rows, q, dtype=torch.long)  # [b, Q]
    for row, (ids, n, p) in enumerate(zip(new_ids, lengths, past, strict=True)):
        input_ids[row, :n] = torch.tensor(list(ids), dtype=torch.long)
        mask[row, width - p:width + n] = 1
        positions[row] = torch.arange(p, p + q)  # pads continue the count; they are masked anyway
    if all_logits:
        keep = torch.arange(q)[None, :] < torch.tensor(lengths)[:, None]  # [b, Q] bool
    else:
        keep = torch.tensor(lengths)[:, None] - 1  # [b, 1] each row's last real position

    logits = handle.forward_padded(cache, input_ids, mask, positions, keep)
    handle.scatter_rows(cache, states, width, lengths)
    for state, n in zip(states, lengths, strict=True):
        _count(state, n, tentative)
    if all_logits:
        return list(logits.split(lengths))  # [sum q_i, V] -> [q_i, V] each
    return list(logits[:, 0])  # [b, 1, V] -> [V] each


def extend_rows(handle: ModelHandle, states: Sequence[CacheState],
                new_ids: Sequence[Sequence[int]]) -> list[torch.Tensor | None]:
    """Batched `ModelHandle.extend`: encode and commit `new_ids[i]` after `states[i]`'s committed
    prefix. Returns each row's next-token logits `[V]` (also set as `state.logits`), None for a row
    with nothing to feed (its state is left alone)."""
    if len(states) != len(new_ids):
        raise ValueError(f"extend_rows: {len(states)} states but {len(new_ids)} lists of new ids")
    fed = [i for i, ids in enumerate(new_ids) if ids]
    out: list[torch.Tensor | None] = [None] * len(states)
    if not fed:
        return out
    logits = forward_rows(handle, [states[i] for i in fed], [new_ids[i] for i in fed])
    for i, row in zip(fed, logits, strict=True):
        states[i].ids.extend(new_ids[i])
        states[i].logits = row
        out[i] = row
    return out


def try_rows(handle: ModelHandle, states: Sequence[CacheState],
             ids: Sequence[Sequence[int]]) -> list[TentativePass]:
    """Batched `ModelHandle.try_tokens`: for each state, feed its pending tokens (committed) and
    then `ids[i]` (not committed) in one shared forward; each `TentativePass` has `logits: [T+1, V]`
    and ends with `.keep(n)` / `.discard()` as a solo pass does. A state whose next-token logits
    went stale re-feeds its last committed token inside the same forward (a solo `try_tokens`
    would run an extra forward for it), so its counters show one more tentative token and one
    fewer decoded one; the caches end the same."""
    if len(states) != len(ids):
        raise ValueError(f"try_rows: {len(states)} states but {len(ids)} lists of ids")
    if not states:
        raise ValueError("try_rows: no rows given (pass at least one state and its ids)")
    for state in states:
        handle.check_batchable(state)  # before any state is changed
    committed: list[list[int]] = []
    for state in states:
        pending, state.pending = state.pending, []
        if not pending and state.logits is None:
            if not state.ids:
                raise ValueError("try_rows: a state with no tokens and no pending tokens has no "
                                 "next-token logits; feed its prompt first")
            pending = [state.ids[-1]]
            handle.rollback(state, len(state.ids) - 1)
        committed.append(pending)
    feeds = [pending + list(row_ids) for pending, row_ids in zip(committed, ids, strict=True)]
    fed = [i for i, feed in enumerate(feeds) if feed]
    rows = dict(zip(fed, forward_rows(handle, [states[i] for i in fed], [feeds[i] for i in fed],
                                      all_logits=True, tentative=True), strict=True)) if fed else {}
    passes = []
    for i, (state, pending) in enumerate(zip(states, committed, strict=True)):
        if i not in rows:
            assert state.logits is not None
            passes.append(TentativePass(handle, state, [], state.logits[None], None))
            continue
        out = rows[i]  # [P+T, V]
        if pending:
            state.ids.extend(pending)
            state.logits = out[len(pending) - 1]
            logits = out[len(pending) - 1:]  # [T+1, V]
        else:
            assert state.logits is not None
            logits = torch.cat([state.logits[None], out])  # [T+1, V]
        passes.append(TentativePass(handle, state, list(ids[i]), logits, Forward(out[None], None)))
    return passes


def _count(state: CacheState, n_tokens: int, tentative: bool) -> None:
    """The counters a solo `ModelHandle.forward` of `n_tokens` tokens would record."""
    if tentative:
        state.counters.tentative += n_tokens
    elif n_tokens > 1:
        state.counters.prefilled += n_tokens
    else:
        state.counters.decoded += 1
    state.counters.forward_calls += 1
