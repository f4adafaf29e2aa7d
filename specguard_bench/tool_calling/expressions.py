"""GSM8K problems as arithmetic expressions, for the agents suite's `--agent-task expression`.

A GSM8K worked answer annotates each calculation: `Natalia sold 48/2 = <<48/2=24>>24 clips in May.
... 48+24 = <<48+24=72>>72 clips`. `chained_expression` chains those annotations into one
expression by writing each earlier result where a later calculation uses it (`24` becomes
`(48/2)`, so every value is kept), checks with exact rational arithmetic that every step and the
whole chain evaluate to their annotated values and the last one to the gold answer, and returns
it in Python's notation: `48 + 48 / 2`. The agent is asked to compute it with the calculator
tools, one call per operation, so a run makes real multi-turn tool calls whose right answer is
the problem's gold.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

from specguard_bench.reasoning.problems import Problem

ANNOTATION = re.compile(r"<<([^<>=]+)=([^<>]+)>>")
TOKEN = re.compile(r"\d+(?:\.\d+)?|[-+*/()]")
MIN_OPERATIONS, MAX_OPERATIONS = 2, 5
QUESTION = "Compute {expression}."


def evaluate(expression: str) -> Fraction:
    """The exact value of `expression` (numbers, + - * / and parentheses only).

    Raises ValueError for anything else, a division by zero included."""
    def value(node: ast.expr) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return Fraction(str(node.value))
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ValueError(f"{expression!r} divides by zero")
            return OPS[type(node.op)](left, right)
        raise ValueError(f"{expression!r} is not plain arithmetic")

    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as err:
        raise ValueError(f"{expression!r} is not an expression: {err.msg}") from None
    return value(tree.body)


OPS = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__, ast.Mult: Fraction.__mul__,
       ast.Div: Fraction.__truediv__}


def operations(expression: str) -> int:
    """How many binary operations `expression` holds."""
    return sum(isinstance(n, ast.BinOp) for n in ast.walk(ast.parse(expression, mode="eval")))


def chained_expression(answer: str, gold: str) -> str | None:
    """One expression for a GSM8K worked answer (see the module docstring), or None when its
    annotations are not plain arithmetic, do not evaluate to their annotated values, do not end
    at `gold`, or chain into fewer than MIN_OPERATIONS or more than MAX_OPERATIONS operations."""
    results: list[tuple[Fraction, str]] = []  # (annotated value, its chained expression)
    for step, annotated in ANNOTATION.findall(answer):
        step = step.replace(",", "").strip()
        tokens = TOKEN.findall(step)
        if "".join(tokens) != step.replace(" ", ""):
            return None  # something besides numbers and + - * / ( )
        chained = "".join(_earlier(t, results) for t in tokens)
        try:
            value = evaluate(chained)
            if value != Fraction(annotated.replace(",", "").strip()):
                return None
        except (ValueError, ZeroDivisionError):
            return None
        results.append((value, chained))
    try:
        if not results or results[-1][0] != Fraction(gold):
            return None
    except ValueError:
        return None
    expression = ast.unparse(ast.parse(results[-1][1], mode="eval"))
    return expression if MIN_OPERATIONS <= operations(expression) <= MAX_OPERATIONS else None


def _earlier(token: str, results: list[tuple[Fraction, str]]) -> str:
    """`token`, or "(expression)" of the latest earlier result it equals."""
    if not token[0].isdigit():
        return token
    for value, chained in reversed(results):
        if value == Fraction(token):
            return f"({chained})"
    return token


def expression_problems(problems: list[Problem], n: int) -> list[Problem]:
    """The first `n` of `problems` (GSM8K, with their worked answers) whose worked answer
    chains into an expression, each asked as "Compute <expression>." with the same gold and the
    expression as its solution; `uid` `gsm8k-expression/<index>`. Raises ValueError when none
    does."""
    out: list[Problem] = []
    for p in problems:
        if len(out) == n:
            break
        expression = chained_expression(p.solution, p.gold)
        if expression is not None:
            out.append(Problem(f"gsm8k-expression/{p.index}", p.dataset, p.index,
                               QUESTION.format(expression=expression), p.gold, expression))
    if not out:
        raise ValueError("no problem in the slice chains into an expression of "
                         f"{MIN_OPERATIONS} to {MAX_OPERATIONS} operations")
    return out
