"""Token classes for `acceptance="exact-numbers"`: digits, operators and list markers, on the
byte-level fixture tokenizer and (opt-in) the default pair's real tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specguard_core.testing import build_tokenizer
from specguard_core.text.tokens import numeric_ids
from tests.fixtures import HAVE_REAL, REAL_REASON, real_pair_dirs


def classes(tok: Any, text: str) -> list[tuple[str, bool]]:
    ids = tok(text, add_special_tokens=False)["input_ids"]
    numeric = numeric_ids(tok)
    return [(tok.decode([i]), i in numeric) for i in ids]


def test_digits_operators_and_markers_are_numeric_words_are_not(tmp_path: Path) -> None:
    tok = build_tokenizer(tmp_path)
    marked = classes(tok, "Then 12 + 7 = 19 apples")
    assert all(flag for piece, flag in marked if any(c in piece for c in "0123456789+="))
    assert not any(flag for piece, flag in marked if piece.strip().isalpha())


@pytest.mark.real
@pytest.mark.skipif(not HAVE_REAL, reason=REAL_REASON)
def test_real_tokenizer_classes() -> None:
    """The default pair's tokenizer (Qwen2.5, 151k tokens): numbers, operators and plan markers
    are numeric; the words of a plan are not."""
    from transformers import AutoTokenizer

    dirs = real_pair_dirs()
    assert dirs is not None
    tok = AutoTokenizer.from_pretrained(str(dirs[0]))
    marked = classes(tok, "1. Multiply 16 - 3 by $2:\n- Then 13 * 2 = 26")
    assert [piece for piece, _ in marked if piece.isdigit()] == list("1163213226")  # one per digit
    for piece, flag in marked:
        stripped = piece.strip()
        if stripped.isdigit() or stripped in {"-", "*", "="}:
            assert flag, piece  # numbers, operators and the bullet
        elif stripped.isalpha() or stripped in {"", "."}:
            assert not flag, piece  # words, spaces, the period after a number
