"""The model handle: catch-up prefills after a cache equal one full forward; capture is exact."""

from __future__ import annotations

from typing import Any

import torch

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.handle import ModelHandle


def test_chunked_catch_up_matches_one_full_forward(tiny_pair: tuple[Any, Any, Any, Any]) -> None:
    _, _, target, tok = tiny_pair
    handle = ModelHandle(target, tok)
    ids = list(range(5, 40))
    full = target(torch.tensor([ids])).logits[0, -1].float()
    state = handle.new_state()
    for chunk in (ids[:10], ids[10:11], ids[11:30], ids[30:]):
        handle.extend(state, chunk)
    assert state.logits is not None
    torch.testing.assert_close(state.logits, full, rtol=1e-4, atol=1e-4)
    assert state.counters.prefilled == len(ids) - 1 and state.counters.decoded == 1


def test_captured_rows_equal_eager_attention(tiny_pair: tuple[Any, Any, Any, Any]) -> None:
    draft, tok, _, _ = tiny_pair
    handle = ModelHandle(draft, tok)
    ids = list(range(7, 30))
    state = handle.new_state()
    handle.extend(state, ids[:15])
    layers = frozenset({1, 2})
    recorder = AttentionRecorder(layers)
    handle.forward(state, torch.tensor([ids[15:]]), recorder=recorder)  # [1, L, 8, 23] rows
    draft.set_attn_implementation("eager")
    try:
        eager = draft(torch.tensor([ids]), output_attentions=True).attentions
    finally:
        draft.set_attn_implementation("specguard_sdpa")
    for i, layer in enumerate(sorted(layers)):
        expected = eager[layer][0].mean(dim=0)[15:]  # heads averaged, rows of the last 8 tokens
        torch.testing.assert_close(recorder.stacked()[0, i], expected, rtol=1e-4, atol=1e-5)


def test_an_extended_tentative_pass_equals_one_pass(tiny_pair: tuple[Any, Any, Any, Any]) -> None:
    _, _, target, tok = tiny_pair
    handle = ModelHandle(target, tok)
    ids = list(range(5, 30))
    one, grown = handle.new_state(), handle.new_state()
    for state in (one, grown):
        state.pending = ids[:10]
    whole = handle.try_tokens(one, ids[10:])
    tpass = handle.try_tokens(grown, ids[10:14])
    tpass.extend(ids[14:15])
    tpass.extend([])
    tpass.extend(ids[15:])
    assert tpass.ids == whole.ids
    torch.testing.assert_close(tpass.logits, whole.logits, rtol=1e-4, atol=1e-4)  # [T+1, V]
    tpass.keep(7)  # commits a prefix; the rest of the cache rolls back
    assert grown.ids == ids[:17] and grown.cache is not None
    assert grown.cache.get_seq_length() == 17
    handle.extend(grown, ids[17:])
    assert grown.logits is not None
    torch.testing.assert_close(grown.logits, whole.logits[-1], rtol=1e-4, atol=1e-4)
