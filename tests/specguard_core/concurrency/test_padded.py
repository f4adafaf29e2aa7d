"""Batched forwards over several requests' caches equal each request's solo forwards, and leave
every cache as a solo forward would (float32, tiny real-architecture models, random weights)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from specguard_core.cache.capture import AttentionRecorder
from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import CacheState
from specguard_core.concurrency.padded import extend_rows, forward_rows, try_rows

VOCAB = 300
ATOL = 5e-5  # logits here reach ~10: float32 rounding of differently shaped matmuls
HIDDEN_RTOL = 1e-4  # hidden states grow through the residual stream


class _Tok:
    eos_token_id = 2


def _handle(arch: str, device: str = "cpu") -> ModelHandle:
    torch.manual_seed(0)
    common: dict[str, Any] = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=3, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=512,
                                  initializer_range=0.3)  # wide init: logits differ a lot by context
    model = (Qwen2ForCausalLM(Qwen2Config(**common)) if arch == "qwen2"
             else LlamaForCausalLM(LlamaConfig(**common)))
    return ModelHandle(model.float().to(device), _Tok(), name=arch)


@pytest.fixture(params=["qwen2", "llama"])
def handle(request: pytest.FixtureRequest, device: str) -> ModelHandle:
    """Each architecture on each test device (`device` in conftest)."""
    return _handle(request.param, device)


def _prompts(lengths: list[int], seed: int = 1) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths]


def _states(handle: ModelHandle, prompts: list[list[int]]) -> list[CacheState]:
    states = []
    for ids in prompts:
        state = handle.new_state()
        handle.extend(state, ids)
        states.append(state)
    return states


def _assert_caches_equal(a: CacheState, b: CacheState) -> None:
    assert a.cache is not None and b.cache is not None
    assert a.cache.get_seq_length() == b.cache.get_seq_length()
    for la, lb in zip(a.cache.layers, b.cache.layers, strict=True):
        torch.testing.assert_close(la.keys, lb.keys, atol=ATOL, rtol=0)
        torch.testing.assert_close(la.values, lb.values, atol=ATOL, rtol=0)


def _decode_on(handle: ModelHandle, states: list[CacheState], steps: int) -> list[torch.Tensor]:
    """Greedy-decode each state solo for `steps` tokens; the logits of every step, stacked."""
    out = []
    for state in states:
        rows = []
        for _ in range(steps):
            assert state.logits is not None
            rows.append(state.logits)
            handle.extend(state, [int(state.logits.argmax())])
        out.append(torch.stack(rows))
    return out


def test_a_forward_failing_after_the_model_ran_changes_no_cache(handle: ModelHandle) -> None:
    states = _states(handle, _prompts([5, 7]))
    before = [(s.cache.get_seq_length() if s.cache else 0, s.counters) for s in states]
    before = [(n, type(c)(**vars(c))) for n, c in before]  # copies of the counters
    with pytest.raises(KeyError):  # the recorder asks for a layer the model does not have
        forward_rows(handle, states, [[5], torch.tensor([6, 7])],
                     recorders=[AttentionRecorder(frozenset({99})), None])
    assert [(s.cache.get_seq_length() if s.cache else 0, s.counters) for s in states] == before
    out = forward_rows(handle, states, [[5], torch.tensor([6, 7])])  # a 1-D tensor is one row
    assert [o.logits.shape[:2] for o in out] == [(1, 1), (1, 1)]


@pytest.mark.parametrize("all_logits", [False, True])
def test_forked_proposals_batch_with_single_rows_as_solo_forwards(
        handle: ModelHandle, all_logits: bool) -> None:
    """A proposal's k forked cache rows join a padded forward as k rows (k = 3 and 2 beside a
    single row): logits, hidden states, attention rows, caches and counters equal solo forwards."""
    prompts = _prompts([6, 19, 11])
    forks = [3, 1, 2]
    solo, batched = _states(handle, prompts), _states(handle, prompts)
    for s, b, k in zip(solo, batched, forks, strict=True):
        handle.fork(s, k)
        handle.fork(b, k)
    layers = frozenset({0, 2})
    for step in range(3):  # a proposal feeds one token per row per step
        feeds = [torch.tensor(_prompts([1] * k, seed=10 * step + i)) for i, k in enumerate(forks)]
        solo_rec = [AttentionRecorder(layers) for _ in solo]
        solo_out = [handle.forward(s, f, all_logits=all_logits, hidden=True, recorder=r)
                    for s, f, r in zip(solo, feeds, solo_rec, strict=True)]
        batched_rec = [AttentionRecorder(layers) for _ in batched]
        batched_out = forward_rows(handle, batched, feeds, all_logits=all_logits, hidden=True,
                                   recorders=batched_rec)
        for so, bo, sr, br in zip(solo_out, batched_out, solo_rec, batched_rec, strict=True):
            assert bo.logits.shape == so.logits.shape  # [k, 1, V]
            torch.testing.assert_close(bo.logits, so.logits, atol=ATOL, rtol=0)
            assert bo.layers is not None and so.layers is not None
            for h_b, h_s in zip(bo.layers, so.layers, strict=True):
                assert h_b.shape == h_s.shape  # [k, 1, d]
                torch.testing.assert_close(h_b, h_s, atol=2 * ATOL, rtol=HIDDEN_RTOL)
            for layer in layers:
                assert br.rows[layer].shape == sr.rows[layer].shape  # [k, 1, n_keys]
                torch.testing.assert_close(br.rows[layer], sr.rows[layer], atol=1e-5, rtol=0)
    # the rows of one proposal differ (different tokens): a mix-up of rows could not pass
    assert (solo_out[0].logits[0] - solo_out[0].logits[1]).abs().max() > 100 * ATOL
    for s, b in zip(solo, batched, strict=True):
        _assert_caches_equal(s, b)
        assert s.counters == b.counters
    with pytest.raises(ValueError, match=r"holds 3 row\(s\) but 2 row\(s\)"):
        forward_rows(handle, batched[:1], [torch.tensor([[5], [6]])])


def test_batched_decode_and_verify_equal_solo_forwards(handle: ModelHandle) -> None:
    prompts = _prompts([5, 17, 30, 9])
    new = _prompts([1, 4, 2, 7], seed=2)  # different counts of new tokens per request
    solo, batched = _states(handle, prompts), _states(handle, prompts)
    layers = frozenset({1, 2})
    solo_rec = [AttentionRecorder(layers) for _ in solo]
    solo_out = [handle.forward(s, torch.tensor([ids]), all_logits=True, hidden=True, recorder=r)
                for s, ids, r in zip(solo, new, solo_rec, strict=True)]
    batched_rec = [AttentionRecorder(layers) if i != 2 else None for i in range(len(batched))]
    batched_out = forward_rows(handle, batched, new, all_logits=True, hidden=True,
                               recorders=batched_rec)
    for so, bo, sr, br in zip(solo_out, batched_out, solo_rec, batched_rec, strict=True):
        assert bo.hidden is not None and so.hidden is not None
        assert bo.layers is not None and so.layers is not None
        for h_b, h_s in zip((bo.hidden, *bo.layers), (so.hidden, *so.layers), strict=True):
            assert h_b.shape == h_s.shape  # [1, q, d]
            torch.testing.assert_close(h_b, h_s, atol=ATOL, rtol=HIDDEN_RTOL)
        if br is not None:
            for layer in layers:
                assert br.rows[layer].shape == sr.rows[layer].shape  # [1, q, n_keys]
                torch.testing.assert_close(br.rows[layer], sr.rows[layer], atol=1e-5, rtol=0)  # probabilities
    expected = [o.logits[0] for o in solo_out]
    got = [o.logits[0] for o in batched_out]
    # the test can fail: the requests' logits differ from each other by far more than ATOL
    assert (expected[0][-1] - expected[1][-1]).abs().max() > 100 * ATOL
    for e, g in zip(expected, got, strict=True):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e, atol=ATOL, rtol=0)
    for s, b, ids, e, g in zip(solo, batched, new, expected, got, strict=True):
        _assert_caches_equal(s, b)
        assert s.counters == b.counters
        s.ids += ids  # commit the fed tokens, as `extend` would
        b.ids += ids
        s.logits, b.logits = e[-1], g[-1]
    # decoding on afterwards, each request alone, gives the same logits from both caches
    for e, g in zip(_decode_on(handle, solo, 5), _decode_on(handle, batched, 5), strict=True):
        torch.testing.assert_close(g, e, atol=ATOL, rtol=0)


def test_last_logits_only_and_prefill_row_mixed_with_decode_rows(handle: ModelHandle) -> None:
    prompts = _prompts([12, 25, 3])
    solo, batched = _states(handle, prompts), _states(handle, prompts)
    solo.append(handle.new_state())
    batched.append(handle.new_state())  # an empty cache: its row is a prefill
    new = [[7], [8], [9], _prompts([20], seed=3)[0]]
    expected = extend_rows_solo(handle, solo, new)
    got = extend_rows(handle, batched, new)
    for e, g, s, b in zip(expected, got, solo, batched, strict=True):
        assert g is not None and g.shape == (VOCAB,)
        torch.testing.assert_close(g, e, atol=ATOL, rtol=0)
        assert b.ids == s.ids and b.logits is g
        assert b.counters == s.counters
        _assert_caches_equal(s, b)
    assert batched[3].counters.prefilled == 20 and batched[0].counters.decoded == 1
    for e, g in zip(_decode_on(handle, solo, 4), _decode_on(handle, batched, 4), strict=True):
        torch.testing.assert_close(g, e, atol=ATOL, rtol=0)


def test_per_row_logits_and_counters_for_calls_of_different_kinds(handle: ModelHandle) -> None:
    """Rows of different calls in one forward (the scheduler's rounds): a verification pass (all
    logits, tentative), a catch-up (last logits) and a decode, each as its solo forward."""
    prompts = _prompts([6, 14, 9])
    solo, batched = _states(handle, prompts), _states(handle, prompts)
    new = _prompts([5, 3, 1], seed=4)
    every, tentative = [True, False, False], [True, False, False]
    solo_out = [handle.forward(s, torch.tensor([ids]), all_logits=a, tentative=t)
                for s, ids, a, t in zip(solo, new, every, tentative, strict=True)]
    batched_out = forward_rows(handle, batched, new, all_logits=every, tentative=tentative)
    for so, bo, s, b in zip(solo_out, batched_out, solo, batched, strict=True):
        assert bo.logits.shape == so.logits.shape  # [1, 5, V], [1, 1, V], [1, 1, V]
        torch.testing.assert_close(bo.logits, so.logits, atol=ATOL, rtol=0)
        assert b.counters == s.counters
        _assert_caches_equal(s, b)
    assert batched[0].counters.tentative == 5 and batched[1].counters.prefilled == 14 + 3
    with pytest.raises(ValueError, match="per-row flags"):
        forward_rows(handle, batched, new, all_logits=[True])


def extend_rows_solo(handle: ModelHandle, states: list[CacheState],
                     new: list[list[int]]) -> list[torch.Tensor]:
    out = []
    for state, ids in zip(states, new, strict=True):
        handle.extend(state, ids)
        assert state.logits is not None
        out.append(state.logits)
    return out


def test_try_rows_equals_try_tokens_then_keep_and_discard(handle: ModelHandle) -> None:
    prompts = _prompts([6, 21, 14])
    solo, batched = _states(handle, prompts), _states(handle, prompts)
    for group in (solo, batched):
        group[1].pending = [11, 12, 13]  # committed elsewhere, not yet encoded here
        handle.rollback(group[2], 13)  # logits go stale: the last token is re-fed
    drafts = _prompts([8, 3, 5], seed=4)
    solo_rec = [AttentionRecorder(frozenset({2})) for _ in solo]
    batched_rec = [AttentionRecorder(frozenset({2})) for _ in batched]
    solo_passes = [handle.try_tokens(s, d, recorder=r, hidden=True)
                   for s, d, r in zip(solo, drafts, solo_rec, strict=True)]
    batched_passes = try_rows(handle, batched, drafts, hidden=True, recorders=batched_rec)
    for sp, bp, sr, br in zip(solo_passes, batched_passes, solo_rec, batched_rec, strict=True):
        assert bp.logits.shape == sp.logits.shape == (len(sp.ids) + 1, VOCAB)
        torch.testing.assert_close(bp.logits, sp.logits, atol=ATOL, rtol=0)
        assert bp.forward is not None and sp.forward is not None
        assert bp.forward.hidden is not None and sp.forward.hidden is not None
        torch.testing.assert_close(bp.forward.hidden, sp.forward.hidden, atol=ATOL,
                                   rtol=HIDDEN_RTOL)
        torch.testing.assert_close(br.rows[2], sr.rows[2], atol=1e-5, rtol=0)  # probabilities
    for i, keep in enumerate((3, 0, 5)):
        solo_passes[i].keep(keep)
        batched_passes[i].keep(keep) if keep else batched_passes[i].discard()
    for s, b in zip(solo, batched, strict=True):
        assert s.ids == b.ids
        _assert_caches_equal(s, b)
    for e, g in zip(_decode_on(handle, solo, 4), _decode_on(handle, batched, 4), strict=True):
        torch.testing.assert_close(g, e, atol=ATOL, rtol=0)


def test_counters_hold_the_cache_length_invariant() -> None:
    handle = _handle("qwen2")
    states = _states(handle, _prompts([4, 9]))
    try_rows(handle, states, [[5, 6], [7]])[0].keep(1)
    forward_rows(handle, states[1:], [[8]])
    for s in states:
        c = s.counters
        assert s.cache is not None
        assert c.prefilled + c.decoded + c.tentative - c.discarded == s.cache.get_seq_length()


def test_bad_input_gets_a_clear_value_error() -> None:
    handle = _handle("qwen2")
    states = _states(handle, _prompts([4, 9]))
    with pytest.raises(ValueError, match="no rows"):
        forward_rows(handle, [], [])
    with pytest.raises(ValueError, match="2 states but 1 lists"):
        forward_rows(handle, states, [[5]])
    with pytest.raises(ValueError, match="as many recorders"):
        forward_rows(handle, states, [[5], [6]], recorders=[None])
    with pytest.raises(ValueError, match="row 1 has no new tokens"):
        forward_rows(handle, states, [[5], []])
    with pytest.raises(ValueError, match="same state appears twice"):
        forward_rows(handle, [states[0], states[0]], [[5], [6]])
    with pytest.raises(ValueError, match="3 states but 2 lists"):
        extend_rows(handle, states + [handle.new_state()], [[1], [2]])
    handle.fork(states[1], 3)
    with pytest.raises(ValueError, match=r"holds 3 row\(s\) but 1 row\(s\) of new tokens"):
        try_rows(handle, states, [[5], [6]])
    assert states[0].pending == [] and len(states[0].ids) == 4  # nothing changed before the error
    with pytest.raises(ValueError, match="served target"):
        forward_rows(handle, [CacheState(cache=None)], [[5]])
    assert all(len(s.ids) in (4, 9) for s in states)
