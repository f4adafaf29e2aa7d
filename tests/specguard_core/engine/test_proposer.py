"""`sample_tokens`: the shortlist path draws from the exact nucleus distribution (statistical test);
a watched proposal stops where its watcher says."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from specguard_core.cache.handle import ModelHandle
from specguard_core.decoding.proposal import SampleSpec
from specguard_core.decoding.sampling import nucleus_probs, sample_tokens, sample_with_probs
from specguard_core.engine.proposer import propose
from specguard_core.text.steps import StepRules
from tests.specguard_core.engine.stats_helpers import chi_square_p


def _logits(vocab: int = 20000, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab, generator=g)
    logits[:40] += torch.linspace(10.0, 7.0, 40)  # a head the nucleus lives in, a long tail
    return logits


def test_shortlist_path_keeps_the_nucleus_distribution() -> None:
    logits, temp, top_p = _logits(4000), 0.9, 0.8  # a vocabulary well past the shortlist
    exact = nucleus_probs(logits, temp, top_p)  # [V]
    top = torch.softmax(logits / temp, -1).topk(1024).values.sum()
    assert float(top) >= top_p  # so sample_tokens takes the shortlist path
    n = 40000
    tokens = sample_tokens(logits.expand(n, -1), temp, top_p, torch.Generator().manual_seed(1))
    counts = torch.bincount(tokens, minlength=logits.shape[0]).double()
    assert chi_square_p(counts, exact) > 1e-3
    shifted = nucleus_probs(logits, temp, 0.95)  # a slightly wider nucleus must be told apart
    assert chi_square_p(counts, shifted) < 1e-6


def test_full_sort_fallback_and_reported_probabilities() -> None:
    logits, temp, top_p = torch.zeros(3000), 1.0, 0.9  # flat: the shortlist holds < top_p
    tokens, probs = sample_with_probs(logits.expand(500, -1), temp, top_p,
                                      torch.Generator().manual_seed(2))
    exact = nucleus_probs(logits, temp, top_p)
    assert torch.allclose(probs, exact[tokens].float(), rtol=1e-3)
    greedy, ones = sample_with_probs(_logits()[None], 0.0, 1.0, torch.Generator())
    assert int(greedy) == int(_logits().argmax()) and float(ones) == 1.0


def test_a_watched_proposal_has_one_candidate(tiny_pair: tuple[Any, Any, Any, Any]) -> None:
    draft, tok, _, _ = tiny_pair
    handle = ModelHandle(draft, tok)
    state = handle.new_state()
    handle.extend(state, list(range(5, 12)))
    rules = StepRules.for_tokenizer(tok, ("\n\n",))
    with pytest.raises(ValueError, match="one candidate"):
        propose(handle, state, SampleSpec(2, 0.0, 1.0, 8, rules), torch.Generator(),
                watch=lambda ids, lps: False)
    seen: list[int] = []
    proposal = propose(handle, state, SampleSpec(1, 0.0, 1.0, 8, rules), torch.Generator(),
                       watch=lambda ids, lps: seen.append(len(ids)) or len(ids) == 3)
    cand = proposal.candidates[0]
    assert cand.end == "refused" and len(cand.token_ids) == cand.n_fed == 3 and seen == [1, 2, 3]
    proposal.keep(0)
    assert len(state.ids) == 10


@pytest.mark.parametrize("pool", [(), (0,)])
@pytest.mark.parametrize("refuse_at", [None, 22])  # 22: inside the first guessed repeat
def test_guesses_change_the_forwards_not_the_proposal(refuse_at: int | None,
                                                      pool: tuple[int, ...]) -> None:
    """A one-candidate proposal with prompt-lookup guesses on a draft whose reply repeats itself:
    the same step, probabilities, end and pooled hidden states in fewer forwards (watched or
    not), and the cache holds the prefix and the fed tokens, the guesses not picked forgotten."""
    from specguard_core.testing import scripted_engine

    reply = "So 48 + 24 = 72, and again 48 + 24 = 72, and once more 48 + 24 = 72 clips."
    eng = scripted_engine(lambda prompt: reply)
    handle, prompt = eng.draft, eng.prompt_ids("How many clips?")
    rules = StepRules.for_tokenizer(eng.draft.tokenizer, ("\n\n",))
    seen: dict[int, tuple[Any, ...]] = {}
    for look in (0, 8):
        state = handle.new_state()
        handle.extend(state, prompt)
        calls = state.counters.forward_calls
        spec = SampleSpec(1, 0.0, 1.0, 64, rules, pool_layers=pool, lookahead=look)
        proposal = propose(handle, state, spec, torch.Generator(),
                           watch=lambda ids, lps: refuse_at is not None and len(ids) == refuse_at)
        cand = proposal.candidates[0]
        assert state.cache.get_seq_length() == len(prompt) + cand.n_fed
        pooled = [(layer, v.tolist()) for layer, v in cand.pooled.items()]
        assert len(pooled) == len(pool)
        seen[look] = (cand.token_ids, cand.logprobs, cand.end, cand.n_fed, pooled,
                      state.counters.forward_calls - calls)
        proposal.keep(0)
        if cand.end == "refused":  # the draft goes on from the kept tokens on its script
            n = len(cand.token_ids)
            assert int(handle.next_logits(state).argmax()) == handle.encode(reply)[n]
    assert seen[8][:5] == seen[0][:5]
    text = handle.tokenizer.decode(seen[0][0], skip_special_tokens=True)
    assert text and reply.startswith(text)
    assert seen[8][5] < seen[0][5] - (5 if refuse_at is None else 0)  # repeats came from guesses
