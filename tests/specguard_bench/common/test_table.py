"""`md_table`: the markdown tables every bench report is written with."""

from __future__ import annotations

from specguard_bench.common.table import md_table


def test_header_separator_and_rows_as_given() -> None:
    table = md_table(("method", "tok/s"), [["target", "4.0"], ["specguard-fast", "–"]])
    assert table == ("| method | tok/s |\n|---|---|\n| target | 4.0 |\n"
                     "| specguard-fast | – |\n")


def test_no_rows_leaves_the_header_and_rows_may_be_a_generator() -> None:
    assert md_table(("a", "b", "c"), []) == "| a | b | c |\n|---|---|---|\n"
    assert md_table(("n",), ([str(i)] for i in range(2))) == "| n |\n|---|\n| 0 |\n| 1 |\n"
