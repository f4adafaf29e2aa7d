"""Feeding a model prompt-lookup guesses beside its own tokens (`GuessFeed`).

Each forward that feeds a model's token also feeds the tokens `lookup_guess` expects after it; a
token the model then picks as guessed is read off that forward instead of costing one of its own.
The guesses stay uncommitted after the fed tokens and are cropped when the model parts from them.
The draft's one-candidate step proposals (`engine/proposer.py`) and its runs in the speculative
fallback (`engine/fallback.py`) go through it.
"""

from __future__ import annotations

import torch

from specguard_core.cache.model import CachedModel
from specguard_core.cache.state import CacheState, Forward
from specguard_core.decoding.lookup import lookup_guess


class GuessFeed:
    """A draft's token-by-token forwards after `state`'s committed prefix, each also feeding the
    tokens `lookup_guess` expects next (up to `lookahead`): a token the draft then picks as guessed
    needs no forward of its own. The fed tokens stay uncommitted (the cache holds the prefix, the
    fed tokens, then the pending guesses); end with `close` (forget the guesses not picked; a
    `Proposal` commits the fed tokens) or `commit` (commit them too)."""

    def __init__(self, handle: CachedModel, state: CacheState, lookahead: int,
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
