"""Prompt lookup: guess the next tokens of a sequence from an earlier occurrence of its last
tokens (Saxena 2023, "prompt lookup decoding"; transformers' `prompt_lookup_num_tokens`).

Reasoning text repeats itself: numbers and phrases of the question, an equation's terms in the
next line. `lookup_guess` finds the most recent earlier place where the sequence's last n tokens
(n from `max_ngram` down to 1) occur and returns what followed there. The draft checks such
guesses against its own choices in one forward (`decoding/guesses.py`), so a guess never changes
what the draft proposes, only how many forwards it takes. Pure Python over token ids.
"""

from __future__ import annotations

from collections.abc import Sequence


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
