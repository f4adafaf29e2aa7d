"""Prompt lookup: guess the next tokens of a sequence from an earlier occurrence of its last
tokens (Saxena 2023, "prompt lookup decoding"; transformers' `prompt_lookup_num_tokens`).

Reasoning text repeats itself: numbers and phrases of the question, an equation's terms in the
next line. `lookup_guess` finds the most recent earlier place where the sequence's last n tokens
(n from `max_ngram` down to 1) occur and returns what followed there. The draft checks such
guesses against its own choices in one forward, so a guess never changes what the draft
proposes, only how many forwards it takes. `lookup_guess` is pure Python over token ids;
`GuessFeed` feeds a model its tokens with the guesses and forgets the guesses it did not pick
(the draft's fallback runs in `engine/fallback.py`, its step proposals in `engine/proposer.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specguard_core.cache.handle import ModelHandle
from specguard_core.cache.state import CacheState, Forward


def lookup_guess(ids: Sequence[int], max_tokens: int, max_ngram: int = 3) -> list[int]:
    """Up to `max_tokens` ids that followed the most recent earlier occurrence of the longest
    suffix of `ids` of at most `max_ngram` tokens; [] when no suffix occurs earlier (or
    `max_tokens` < 1)."""
    if max_tokens < 1:
        return []
    n_ids = len(ids)
    for n in range(min(max_ngram, n_ids - 1), 0, -1):
        tail = list(ids[n_ids - n:])
        first = tail[0]
        for start in range(n_ids - n - 1, -1, -1):  # the most recent occurrence first
            if ids[start] == first and list(ids[start:start + n]) == tail:
                return list(ids[start + n:start + n + max_tokens])
    return []


class GuessFeed:
    """A draft's token-by-token forwards after `state`'s committed prefix, each also feeding the
    tokens `lookup_guess` expects next (up to `lookahead`): a token the draft then picks as guessed
    needs no forward of its own. The fed tokens stay uncommitted (the cache holds the prefix, the
    fed tokens, then the pending guesses); end with `close` (forget the guesses not picked; a
    `Proposal` commits the fed tokens) or `commit` (commit them too). Used by the draft's
    one-candidate step proposals (`engine/proposer.py`) and its runs in the speculative fallback
    (`engine/fallback.py`)."""

    def __init__(self, handle: ModelHandle, state: CacheState, lookahead: int,
                 hidden: bool = False) -> None:
        self.handle, self.state, self.lookahead, self.hidden = handle, state, lookahead, hidden
        self.fed: list[int] = []  # tokens in the cache after the prefix
        self.guess: list[int] = []  # guessed tokens in the cache after them
        self.out: Forward | None = None  # the last forward: [a fed token, *guesses fed with it]
        self.at = 0  # the position of the last fed token in `out`

    def feed(self, tok: int, room: int | None = None) -> Forward:
        """Feed `tok` (guessing at most `room` tokens after it, when given); what the forward gives
        at its position: logits `[1, 1, V]` predicting the next token, hidden states when asked."""
        if self.guess and self.guess[0] == tok:
            self.guess, self.at = self.guess[1:], self.at + 1
        else:
            self.close()
            limit = self.lookahead if room is None else min(self.lookahead, room)
            self.guess = lookup_guess(self.state.ids + self.fed + [tok], limit)
            self.out = self.handle.forward(self.state, torch.tensor([[tok] + self.guess]),
                                           all_logits=bool(self.guess), tentative=bool(self.guess),
                                           hidden=self.hidden)
            self.at = 0
        self.fed.append(tok)
        assert self.out is not None
        return self.out.position(self.at)

    def close(self) -> None:
        """Forget the guesses not picked: the cache holds the prefix and the fed tokens."""
        if self.guess:
            self.handle.crop_uncommitted(self.state, len(self.fed))
            self.guess = []

    def commit(self) -> None:
        """Close, and commit the fed tokens to `state` (its next-token logits: the last fed
        token's)."""
        self.close()
        if self.fed:
            assert self.out is not None
            self.handle.commit_row(self.state, 0, self.fed, self.out.logits[0, self.at])
            self.fed = []
