"""Markdown tables of the bench's reports: `md_table` writes a header row, a `|---|` separator
and one row per sequence of already formatted cells.

Ten lines by hand rather than a library: `tabulate` is not a dependency, and its "pipe" format
pads every column to its widest cell, which would rewrite every stored `results.md`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def md_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """`| a | b |` lines: `head`, a `|---|---|` separator, then `rows`; ends with a newline.
    Cells are written as given (no padding, no escaping of `|`)."""
    lines = [_line(head), "|" + "---|" * len(head)]
    lines += [_line(cells) for cells in rows]
    return "\n".join(lines) + "\n"


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"
