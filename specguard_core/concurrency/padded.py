"""One forward of a model over several requests' rows: the layer a batching scheduler builds on.

Each request keeps its own `CacheState` (one cache row, or a forked proposal's k). `forward_rows`
lends those caches to one padded forward and hands each request its new positions back, so
afterwards every state is as if its tokens had been fed alone:

    columns:  [ left pad | cached prefix of row i ][ new tokens of row i | right pad ]
              <------------- W = longest cache ----><----------- Q = most new tokens ----->

A 2-D attention mask hides the pads and explicit position ids put row i's new tokens at
`len(cache_i) + j`; transformers combines the mask with causality by column, so a row sees exactly
its own tokens. Right padding of the new tokens keeps every query row unmasked somewhere (a pad
query sees its row's real tokens), so SDPA never meets a fully masked row. Logits are projected only
for the positions asked for (`logits_to_keep` per row), never for the pads; hidden states and
recorded attention rows are cut back to each row's own positions and keys.

`extend_rows` and `try_rows` are the batched `ModelHandle.extend` / `ModelHandle.try_tokens`.
The cache copying lives in `ModelHandle.gather_rows` / `scatter_rows`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.model import count_forward
from specguard_core.cache.state import CacheState, Forward, TentativePass

PAD_ID = 0  # any valid token id: pad columns are masked out and their outputs dropped


def forward_rows(handle: ModelHandle, states: Sequence[CacheState],
                 new_ids: Sequence[Sequence[int] | torch.Tensor], *,
                 all_logits: bool | Sequence[bool] = False, hidden: bool = False,
                 recorders: Sequence[AttentionRecorder | None] | None = None,
                 tentative: bool | Sequence[bool] = False) -> list[Forward]:
    """Feed `new_ids[i]` after what `states[i].cache` holds, for every i, in one forward.

    `new_ids[i]` is one row of ids, or a `[r, q]` tensor for a state whose cache holds r rows (a
    forked proposal's k candidates, one token each). Returns, per state, the `Forward` a solo
    `handle.forward(states[i], ids as [r, q], ...)` would: `logits: [r, q', V]` float32 (q' = 1,
    the last position, unless `all_logits`: then all q positions), with `hidden` the last hidden
    state and every layer's `[r, q, d]`; `recorders[i]` (if given) receives that state's
    attention rows `[r, q, n_keys]`. `all_logits` and `tentative` may also be given per state
    (rows of different requests' calls in one forward). Each cache grows by its new tokens;
    `ids`/`logits` are not touched. Counters count per request as a solo forward would. Raises
    ValueError for no rows, mismatched lengths, an empty row, rows that do not match the cache's,
    or a cache that cannot be batched (served, sliding-window)."""
    if not states:
        raise ValueError("forward_rows: no rows given (pass at least one state and its new ids)")
    if len(states) != len(new_ids) or (recorders is not None and len(recorders) != len(states)):
        raise ValueError(f"forward_rows: {len(states)} states but {len(new_ids)} lists of new ids"
                         " (and as many recorders, if any); pass one of each per state")
    if len({id(s) for s in states}) != len(states):
        raise ValueError("forward_rows: the same state appears twice; give each request one row")
    feeds = [torch.atleast_2d(ids.long().cpu()) if isinstance(ids, torch.Tensor)
             else torch.tensor([list(ids)], dtype=torch.long) for ids in new_ids]  # [r_i, q_i]
    lengths = [int(f.shape[1]) for f in feeds]
    every, tentatives = _per_row(all_logits, len(states)), _per_row(tentative, len(states))
    if min(lengths) == 0:
        raise ValueError(f"forward_rows: row {lengths.index(0)} has no new tokens; leave it out")
    for state, feed in zip(states, feeds, strict=True):
        handle.check_batchable(state, rows=int(feed.shape[0]))
    cache = handle.gather_rows(states)  # [b, h, W, d] per layer, rows left-padded
    width, q = cache.get_seq_length(), max(lengths)
    past = [s.cache.get_seq_length() if s.cache is not None else 0 for s in states]
    counts = [int(f.shape[0]) for f in feeds]
    blocks = [slice(a - r, a) for a, r in zip(itertools.accumulate(counts), counts, strict=True)]

    rows = sum(counts)
    input_ids = torch.full((rows, q), PAD_ID, dtype=torch.long)  # [b, Q] right-padded
    mask = torch.zeros(rows, width + q, dtype=torch.long)  # [b, W + Q]
    positions = torch.zeros(rows, q, dtype=torch.long)  # [b, Q]
    for block, feed, n, p in zip(blocks, feeds, lengths, past, strict=True):
        input_ids[block, :n] = feed
        mask[block, width - p:width + n] = 1
        positions[block] = torch.arange(p, p + q)  # pads continue the count; they are masked anyway
    row_lengths = torch.tensor(lengths).repeat_interleave(torch.tensor(counts))  # [b]
    if any(every):  # all of a row's positions, or only its last one
        row_every = torch.tensor(every).repeat_interleave(torch.tensor(counts))  # [b]
        cols = torch.arange(q)[None, :]  # [1, Q]
        ends = row_lengths[:, None]  # [b, 1]
        keep = torch.where(row_every[:, None], cols < ends, cols == ends - 1)  # [b, Q]
    else:
        keep = row_lengths[:, None] - 1  # [b, 1] each row's last real position
    wanted = frozenset().union(*(r.layers for r in recorders or () if r is not None))
    shared = AttentionRecorder(wanted) if wanted else None

    out = handle.forward_padded(cache, input_ids, mask, positions, keep, hidden=hidden,
                                recorder=shared)
    # every output is cut out before any state changes: a failure here leaves all caches as they
    # were (the scheduler then reruns each call alone)
    if any(every):  # flattened [sum kept, V] in row order: a state's block is r x (n or 1) rows
        sizes = [r * (n if e else 1) for r, n, e in zip(counts, lengths, every, strict=True)]
        logits = [x.reshape(r, -1, x.shape[-1]) for x, r in
                  zip(out.logits.split(sizes), counts, strict=True)]  # [r, q', V] each
    else:
        logits = [out.logits[block] for block in blocks]  # [r, 1, V] each
    forwards, rows_seen = [], []
    for i, (block, n, p) in enumerate(zip(blocks, lengths, past, strict=True)):
        layers = tuple(h[block, :n] for h in out.layers) if out.layers else None
        forwards.append(Forward(logits[i], layers[-1] if layers else None, layers))
        recorder = recorders[i] if recorders is not None else None
        rows_seen.append({layer: shared.rows[layer][block, :n, width - p:width + n]
                          for layer in recorder.layers}  # [b, Q, W + Q] -> [r, n, p + n]
                         if recorder is not None and shared is not None else None)
    handle.scatter_rows(cache, states, width, lengths)
    for i, (state, n) in enumerate(zip(states, lengths, strict=True)):
        count_forward(state, counts[i], n, tentatives[i])
        seen = rows_seen[i]
        if recorders is not None and (recorder := recorders[i]) is not None and seen is not None:
            recorder.rows.update(seen)
    return forwards


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
    forwards = forward_rows(handle, [states[i] for i in fed], [new_ids[i] for i in fed])
    for i, forward in zip(fed, forwards, strict=True):
        states[i].ids.extend(new_ids[i])
        states[i].logits = out[i] = forward.logits[0, -1]
    return out


def try_rows(handle: ModelHandle, states: Sequence[CacheState], ids: Sequence[Sequence[int]], *,
             hidden: bool = False,
             recorders: Sequence[AttentionRecorder | None] | None = None) -> list[TentativePass]:
    """Batched `ModelHandle.try_tokens`: for each state, feed its pending tokens (committed) and
    then `ids[i]` (not committed) in one shared forward; each `TentativePass` has `logits: [T+1, V]`
    and its `forward` (hidden states, `recorders[i]`'s rows) as a solo pass would, and ends with
    `.keep(n)` / `.discard()`. A state whose next-token logits went stale re-feeds its last
    committed token inside the same forward (a solo `try_tokens` runs an extra forward for it;
    that position is left out of the pass's `forward` and rows), so its counters show one more
    tentative token and one fewer decoded one; the caches end the same."""
    if len(states) != len(ids) or (recorders is not None and len(recorders) != len(states)):
        raise ValueError(f"try_rows: {len(states)} states but {len(ids)} lists of ids (and as "
                         "many recorders, if any); pass one of each per state")
    if not states:
        raise ValueError("try_rows: no rows given (pass at least one state and its ids)")
    for state in states:
        handle.check_batchable(state)  # before any state is changed
    committed: list[list[int]] = []
    refed: list[int] = []  # 1 where the last committed token is fed again for fresh logits
    for state in states:
        pending, state.pending = state.pending, []
        stale = not pending and state.logits is None
        if stale:
            if not state.ids:
                raise ValueError("try_rows: a state with no tokens and no pending tokens has no "
                                 "next-token logits; feed its prompt first")
            pending = [state.ids[-1]]
            handle.rollback(state, len(state.ids) - 1)
        committed.append(pending)
        refed.append(int(stale))
    feeds = [pending + list(row_ids) for pending, row_ids in zip(committed, ids, strict=True)]
    fed = [i for i, feed in enumerate(feeds) if feed]
    row_recorders = [recorders[i] for i in fed] if recorders is not None else None
    forwards = dict(zip(fed, forward_rows(
        handle, [states[i] for i in fed], [feeds[i] for i in fed], all_logits=True, hidden=hidden,
        recorders=row_recorders, tentative=True), strict=True)) if fed else {}
    passes = []
    for i, (state, pending) in enumerate(zip(states, committed, strict=True)):
        if i not in forwards:
            assert state.logits is not None
            passes.append(TentativePass(handle, state, [], state.logits[None], None))
            continue
        out = forwards[i].logits[0]  # [P+T, V]
        if pending:
            state.ids.extend(pending)
            state.logits = out[len(pending) - 1]
            logits = out[len(pending) - 1:]  # [T+1, V]
        else:
            assert state.logits is not None
            logits = torch.cat([state.logits[None], out])  # [T+1, V]
        recorder = recorders[i] if recorders is not None else None
        forward = forwards[i] if not refed[i] else (
            _drop_first(forwards[i], recorder) if ids[i] else None)  # as solo: no pass, no forward
        passes.append(TentativePass(handle, state, list(ids[i]), logits, forward))
    return passes


def _drop_first(forward: Forward, recorder: AttentionRecorder | None) -> Forward:
    """The forward without its first query position (a token fed again only for its logits)."""
    if recorder is not None:
        recorder.rows = {layer: rows[:, 1:] for layer, rows in recorder.rows.items()}
    layers = tuple(h[:, 1:] for h in forward.layers) if forward.layers else None
    return Forward(forward.logits[:, 1:], layers[-1] if layers else None, layers)


def _per_row(flag: bool | Sequence[bool], rows: int) -> list[bool]:
    """One flag for every row, or one per row (checked)."""
    if isinstance(flag, bool):
        return [flag] * rows
    if len(flag) != rows:
        raise ValueError(f"forward_rows: {rows} rows but {len(flag)} per-row flags; pass one each")
    return [bool(f) for f in flag]

