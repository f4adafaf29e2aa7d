"""GSM8K worked answers chained into one expression for `--agent-task expression`."""

from __future__ import annotations

from fractions import Fraction

import pytest

from specguard_bench.reasoning.problems import Problem, load_problems
from specguard_bench.tool_calling.expressions import (
    chained_expression,
    evaluate,
    expression_problems,
    operations,
)

JANET = ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
         "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer's market.\n#### 18")
NATALIA = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
           "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")


def test_earlier_results_are_written_as_their_expressions() -> None:
    assert chained_expression(JANET, "18") == "(16 - 3 - 4) * 2"
    assert chained_expression(NATALIA, "72") == "48 + 48 / 2"
    assert chained_expression("<<1,200*3=3,600>> then <<3600/4=900>>", "900") == "1200 * 3 / 4"


@pytest.mark.parametrize("answer, gold", [
    ("<<2^3=8>> and <<8*2=16>>", "16"),          # not + - * /
    ("<<2*3=7>> and <<7*2=14>>", "14"),          # an annotation that is wrong
    (JANET, "19"),                               # does not end at the gold
    ("<<2*3=6>>", "6"),                          # one operation
    ("<<1+1+1+1+1+1+1=7>>", "7"),                # more than five
    ("<<4/(2-2)=0>> <<0+1+1=2>>", "2"),          # divides by zero
    ("no annotations here #### 5", "5"),
])
def test_answers_that_do_not_chain_are_left_out(answer: str, gold: str) -> None:
    assert chained_expression(answer, gold) is None


def test_evaluate_is_exact_and_refuses_anything_but_arithmetic() -> None:
    assert evaluate("(16 - 3 - 4) * 2") == 18
    assert evaluate("1 / 3 * 3") == 1 and evaluate("0.1 + 0.2") == Fraction(3, 10)
    for bad in ("__import__('os').getcwd()", "2 ** 8", "-3 + 1", "x + 1", "1 +"):
        with pytest.raises(ValueError):
            evaluate(bad)
    assert operations("(16 - 3 - 4) * 2") == 3


def test_shipped_problems_become_expressions_that_equal_their_gold() -> None:
    problems = expression_problems(load_problems("gsm8k", 200), 100)
    assert len(problems) == 100
    assert [p.index for p in problems[:5]] == [0, 1, 2, 3, 4]
    assert problems[0].uid == "gsm8k-expression/0"
    assert problems[0].question == "Compute (16 - 3 - 4) * 2."
    for p in problems:
        assert p.question == f"Compute {p.solution}."
        assert evaluate(p.solution) == Fraction(p.gold)
        assert 2 <= operations(p.solution) <= 5


def test_a_slice_without_any_expression_is_a_clear_error() -> None:
    prose = Problem("gsm8k/0", "gsm8k", 0, "How many?", "3", "Three. #### 3")
    with pytest.raises(ValueError, match="no problem in the slice"):
        expression_problems([prose], 5)
