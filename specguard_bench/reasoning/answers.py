"""Answer extraction and checking with math-verify (no ad-hoc string matching).

`grade(completion, gold)` parses the model's answer (math-verify prefers the last `\\boxed{}`, then
"final answer" phrases, then the last number/expression) and compares it with the gold answer
symbolically. Math-verify's timeouts use signals, so call this from the main thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from math_verify import parse, verify

# math-verify gives up after its timeout and then returns no answer, which grades a right answer as
# wrong; its 5 s default was hit by a starved process on a loaded 2-core machine. 30 s leaves room for
# that and still bounds a sympy hang.
TIMEOUT_S = 30


@dataclass(frozen=True)
class Grade:
    """`correct`: math-verify says the prediction equals the gold answer. `predicted`: the
    answer string math-verify extracted (None if none). `boxed`: the last `\\boxed{...}`
    content, if any."""

    correct: bool
    predicted: str | None
    boxed: str | None


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`) in `text`, braces balanced; None if
    there is none or it is not closed."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, begin = 1, i
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i]
        i += 1
    return None


def parse_gold(gold: str) -> list[Any]:
    """Parse a gold answer (a number or a LaTeX expression) with math-verify: first as
    `\\boxed{gold}`, then as `$gold$`, then as plain text."""
    for wrapped in (f"\\boxed{{{gold}}}", f"${gold}$", gold):
        parsed: list[Any] = parse(wrapped, parsing_timeout=TIMEOUT_S)
        if parsed:
            return parsed
    return []


def grade(completion: str, gold: str) -> Grade:
    """Extract the answer of `completion` and check it against `gold` with math-verify."""
    predicted: list[Any] = parse(completion, parsing_timeout=TIMEOUT_S)
    correct = bool(predicted) and bool(verify(parse_gold(gold), predicted, timeout_seconds=TIMEOUT_S))
    shown = str(predicted[-1]) if predicted else None
    return Grade(correct, shown, last_boxed(completion))
