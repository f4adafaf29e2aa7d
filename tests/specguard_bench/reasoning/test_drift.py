"""Drift from the target's text: identical texts drift by nothing, a known divergence is found."""

from __future__ import annotations

from specguard_bench.common.rows import ProblemRow
from specguard_bench.reasoning.drift import drift, drift_summary, drift_table, first_difference


def row(uid: str, method: str, text: str, tokens: int, correct: bool = True) -> ProblemRow:
    return ProblemRow(uid=uid, dataset="gsm8k", index=0, method=method, correct=correct,
                      predicted=None, gold="7", latency_s=1.0, new_tokens=tokens, prompt_tokens=10,
                      finish_reason="stop", text=text)


def test_identical_texts_have_no_drift() -> None:
    rows = [row("a", "target", "3 + 4 = 7", 5), row("a", "token-sd", "3 + 4 = 7", 5)]
    d = drift(rows, "token-sd")
    assert d is not None and d.same_text == 1 and d.length_ratio == 1.0
    assert d.first_difference_median is None and d.parted_early == 0


def test_a_known_divergence_gives_its_position_and_length_ratio() -> None:
    target = "1. Calculate the total number per day.\n\n2. Multiply by 7."
    balanced = "1. Calculate the number eaten by the man in one week.\n\n2. Then 3.\n\n3. Add."
    rows = [row("a", "target", target, 20), row("a", "specguard-balanced", balanced, 30, False),
            row("b", "target", "x", 10), row("b", "specguard-balanced", "x", 10)]
    d = drift(rows, "specguard-balanced")
    assert d is not None
    assert first_difference(balanced, target) == len("1. Calculate the ")
    assert d.first_difference_median == len("1. Calculate the ")
    assert d.same_text == 1 and d.n == 2 and d.parted_early == 1
    assert d.length_ratio == 40 / 30
    assert (d.accuracy, d.target_accuracy) == (0.5, 1.0)
    table = drift_table(drift_summary(rows, ["target", "specguard-balanced"]))
    assert "| specguard-balanced | 1/2 | 1.33x | 17 | 1/2 | 50.0% | 100.0% |" in table


def test_a_prefix_parts_where_the_shorter_text_ends() -> None:
    assert first_difference("abc", "abcdef") == 3
    assert first_difference("abc", "abc") is None


def test_methods_without_the_target_have_no_drift() -> None:
    assert drift([row("a", "token-sd", "x", 1)], "token-sd") is None
    assert drift_table({}) == ""
