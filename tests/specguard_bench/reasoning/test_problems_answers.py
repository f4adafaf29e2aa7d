"""Dataset loading, the prompt, and answer extraction/checking with math-verify."""

from __future__ import annotations

from typing import Any

import pytest

from specguard_bench.reasoning import answers
from specguard_bench.reasoning.answers import grade, last_boxed, parse_gold
from specguard_bench.reasoning.problems import INSTRUCTION, gsm8k_gold, load_problems, messages_for


def test_gsm8k_gold_strips_separators() -> None:
    assert gsm8k_gold("She makes 9 * 2 = $18.\n#### 18") == "18"
    assert gsm8k_gold("... #### 1,600") == "1600"
    with pytest.raises(ValueError):
        gsm8k_gold("no final answer")


def test_load_problems_slices_and_ids() -> None:
    first = load_problems("gsm8k", 3)
    assert [p.uid for p in first] == ["gsm8k/0", "gsm8k/1", "gsm8k/2"]
    assert first[0].gold == "18"
    later = load_problems("gsm8k", 2, offset=500)
    assert [p.index for p in later] == [500, 501]
    math = load_problems("math500", 1)
    assert math[0].uid == "math500/0" and "\\frac{\\pi}{2}" in math[0].gold
    assert len(load_problems("math500", None, offset=398)) == 2


@pytest.mark.parametrize(
    ("dataset", "n", "offset"), [("nope", 1, 0), ("gsm8k", 1, 10_000), ("gsm8k", -1, 0)]
)
def test_load_problems_rejects_bad_slices(dataset: str, n: int, offset: int) -> None:
    with pytest.raises(ValueError):
        load_problems(dataset, n, offset)


def test_prompt_is_the_papers() -> None:
    msgs = messages_for("What is 1+1?")
    assert msgs == [{"role": "user", "content": f"What is 1+1?\n{INSTRUCTION}"}]
    assert INSTRUCTION == "Please reason step by step, and put your final answer within \\boxed{}."


def test_last_boxed_balances_braces() -> None:
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{a}{b}} end") == "\\frac{a}{b}"
    assert last_boxed("no box") is None
    assert last_boxed("\\boxed{unclosed") is None


@pytest.mark.parametrize(
    ("completion", "gold", "correct"),
    [
        ("16 - 3 - 4 = 9\n\n9 * 2 = 18\n\nThe answer is \\boxed{18}.", "18", True),
        ("So she makes \\boxed{\\$18} a day.", "18", True),
        ("The total is \\boxed{1,600}.", "1600", True),
        ("Thus \\boxed{0.5}", "\\frac{1}{2}", True),
        ("Polar form \\boxed{(3, \\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
        ("The answer is \\boxed{17}.", "18", False),
        ("I do not know.", "18", False),
        ("", "18", False),
    ],
)
def test_grade(completion: str, gold: str, correct: bool) -> None:
    assert grade(completion, gold).correct is correct


def test_grade_reports_what_it_extracted() -> None:
    g = grade("first 3, finally \\boxed{42}", "42")
    assert g.correct and g.predicted == "42" and g.boxed == "42"
    assert grade("nothing here", "1").predicted is None


def test_grade_gives_math_verify_a_generous_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """math-verify's 5 s default made a starved process grade a right answer wrong."""
    seen: list[tuple[str, object]] = []

    def recording(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen.append((name, kwargs.get("parsing_timeout", kwargs.get("timeout_seconds"))))
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(answers, "parse", recording("parse", answers.parse))
    monkeypatch.setattr(answers, "verify", recording("verify", answers.verify))
    assert grade("\\boxed{(3, \\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)").correct
    assert {name for name, _ in seen} == {"parse", "verify"}
    assert all(timeout == answers.TIMEOUT_S >= 30 for _, timeout in seen), seen


def test_every_shipped_gold_answer_parses() -> None:
    for dataset in ("gsm8k", "math500"):
        for p in load_problems(dataset, 50):
            assert parse_gold(p.gold), p.uid


def test_load_file_reads_gsm8k_and_math_rows(tmp_path: Any) -> None:
    import json as _json

    from specguard_bench.reasoning.problems import load_file

    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(_json.dumps(r) for r in [
        {"question": "2+2?", "answer": "Add them.\n#### 4"},
        {"problem": "x^2=9, x>0?", "answer": "3"},
        {"question": "3*3?", "answer": "9"},
    ]) + "\n")
    probs = load_file(path)
    assert [(p.uid, p.question, p.gold) for p in probs] == [
        ("mine/0", "2+2?", "4"), ("mine/1", "x^2=9, x>0?", "3"), ("mine/2", "3*3?", "9")]
    assert [p.uid for p in load_file(path, n=1, offset=1)] == ["mine/1"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "no answer"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: a problem needs"):
        load_file(bad)
    with pytest.raises(ValueError, match="does not exist"):
        load_file(tmp_path / "missing.jsonl")


def test_default_caps_per_dataset() -> None:
    import argparse

    from specguard_bench.cli.handlers import _max_new_tokens

    def ns(**kw: Any) -> argparse.Namespace:
        return argparse.Namespace(**{"max_new_tokens": None, "dataset": "gsm8k",
                                     "dataset_file": None, **kw})

    assert _max_new_tokens(ns()) == 700
    assert _max_new_tokens(ns(dataset="math500")) == 800
    assert _max_new_tokens(ns(dataset_file="x.jsonl")) == 800
    assert _max_new_tokens(ns(dataset="math500", max_new_tokens=123)) == 123
