"""`GuessFeed`: a model's forwards with prompt-lookup guesses fed beside its tokens."""

from __future__ import annotations

import torch

from specguard_core.decoding.guesses import GuessFeed
from specguard_core.testing import scripted_engine


def test_a_guess_feed_skips_the_forwards_of_guessed_tokens_and_forgets_the_rest() -> None:
    """`GuessFeed` over a scripted draft whose text repeats: feeding the repeat takes fewer
    forwards than its tokens, each fed position's logits are those of plain one-token forwards,
    and `close`/`commit` leave the cache holding the prefix and the fed tokens only."""
    eng = scripted_engine(lambda prompt: "")
    handle = eng.draft
    prefix = handle.encode("one two three four five six")
    repeat = handle.encode(" one two three four")
    plain, guessed = handle.new_state(), handle.new_state()
    handle.extend(plain, prefix)
    handle.extend(guessed, prefix)
    feed = GuessFeed(handle, guessed, lookahead=8)
    calls = guessed.counters.forward_calls
    for tok in repeat:
        handle.extend(plain, [tok])
        out = feed.feed(tok)  # [1, 1, V]
        assert out.logits.shape[1] == 1
        assert torch.allclose(out.logits[0, -1], plain.logits, atol=1e-5)  # type: ignore[arg-type]
    # the repeat's tokens came from guesses after its first tokens
    assert guessed.counters.forward_calls - calls < len(repeat) - 3
    assert guessed.cache.get_seq_length() > len(prefix) + len(repeat)  # unpicked guesses held
    feed.close()
    assert guessed.cache.get_seq_length() == len(prefix) + len(repeat)
    assert guessed.ids == prefix  # fed, not committed
    feed.commit()
    assert guessed.ids == prefix + repeat == plain.ids
    assert guessed.cache.get_seq_length() == len(guessed.ids)
    assert torch.allclose(handle.next_logits(guessed), plain.logits, atol=1e-5)  # type: ignore[arg-type]
