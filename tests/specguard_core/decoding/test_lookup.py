"""Prompt lookup's guesses: the continuation of the latest earlier occurrence of the longest
suffix of at most `max_ngram` tokens."""

from __future__ import annotations

from specguard_core.decoding.lookup import lookup_guess


def test_the_longest_suffix_wins_over_a_later_shorter_match() -> None:
    #         [1 2 3] 9 ... 3 8 ... [1 2 3]: "3" last occurred before 8, "1 2 3" before 9
    ids = [1, 2, 3, 9, 4, 3, 8, 1, 2, 3]
    assert lookup_guess(ids, 2) == [9, 4]
    assert lookup_guess(ids, 2, max_ngram=1) == [8, 1]


def test_the_most_recent_occurrence_and_the_token_budget() -> None:
    ids = [5, 1, 2, 7, 6, 1, 2, 8, 1, 2]
    assert lookup_guess(ids, 1) == [8]
    assert lookup_guess(ids, 5) == [8, 1, 2]  # what follows, up to the sequence's end
    assert lookup_guess(ids, 0) == []


def test_no_earlier_occurrence_no_guess() -> None:
    assert lookup_guess([1, 2, 3, 4], 4) == []
    assert lookup_guess([], 4) == [] and lookup_guess([7], 4) == []
    assert lookup_guess([7, 7], 4) == [7]
