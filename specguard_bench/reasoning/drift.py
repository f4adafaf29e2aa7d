"""Drift: how far each method's text parts from the target's own greedy text on the same problem.

A lossless method writes the target's text; a lossy one may keep draft text the target would have
phrased (or planned) differently, and the work that follows changes with it. Per method, over the
problems the target also ran: how many texts equal the target's, the ratio of tokens written, where
the texts part (the character offset of the first difference), and both accuracies.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specguard_bench.common.rows import ProblemRow
from specguard_bench.common.table import md_table

REFERENCE = "target"


@dataclass(frozen=True)
class Drift:
    """One method's drift from the target over `n` problems both ran."""

    method: str
    n: int
    same_text: int  # problems whose final text equals the target's
    length_ratio: float | None  # tokens written, summed, over the target's
    first_difference_median: float | None  # median character offset where the texts part
    parted_early: int  # texts that part within their first 200 characters
    accuracy: float
    target_accuracy: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def first_difference(text: str, reference: str) -> int | None:
    """The character offset of the first difference between `text` and `reference` (one a
    prefix of the other: the shorter one's length); None when they are equal."""
    if text == reference:
        return None
    for i, (a, b) in enumerate(zip(text, reference, strict=False)):
        if a != b:
            return i
    return min(len(text), len(reference))


def drift(rows: Sequence[ProblemRow], method: str, reference: str = REFERENCE) -> Drift | None:
    """`method`'s drift from `reference` over the problems both ran (None when there is none)."""
    ref = {r.uid: r for r in rows if r.method == reference}
    pairs = [(r, ref[r.uid]) for r in rows if r.method == method and r.uid in ref]
    if not pairs:
        return None
    parts = [d for r, t in pairs if (d := first_difference(r.text, t.text)) is not None]
    ref_tokens = sum(t.new_tokens for _, t in pairs)
    return Drift(
        method=method, n=len(pairs), same_text=len(pairs) - len(parts),
        length_ratio=sum(r.new_tokens for r, _ in pairs) / ref_tokens if ref_tokens else None,
        first_difference_median=float(statistics.median(parts)) if parts else None,
        parted_early=sum(d < 200 for d in parts),
        accuracy=sum(r.correct for r, _ in pairs) / len(pairs),
        target_accuracy=sum(t.correct for _, t in pairs) / len(pairs),
    )


def drift_summary(rows: Sequence[ProblemRow], methods: Sequence[str]) -> dict[str, Drift]:
    """Each method's drift from the target (the target itself and methods without one left out)."""
    found = {m: drift(rows, m) for m in methods if m != REFERENCE}
    return {m: d for m, d in found.items() if d is not None}


def drift_table(drifts: dict[str, Drift]) -> str:
    """The drifts as a markdown table ('' when there are none)."""
    if not drifts:
        return ""
    head = ("method", "same text as target", "tokens vs target", "first difference (median chars)",
            "parted in first 200 chars", "accuracy", "target's accuracy")
    rows = []
    for d in drifts.values():
        ratio = "-" if d.length_ratio is None else f"{d.length_ratio:.2f}x"
        first = "-" if d.first_difference_median is None else f"{d.first_difference_median:.0f}"
        rows.append([d.method, f"{d.same_text}/{d.n}", ratio, first, f"{d.parted_early}/{d.n}",
                     f"{d.accuracy:.1%}", f"{d.target_accuracy:.1%}"])
    return md_table(head, rows)
