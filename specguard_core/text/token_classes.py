"""Token classes the target's check can treat apart (torch-free).

`numeric_ids`: the vocabulary's tokens that hold a digit, an arithmetic or comparison operator, or
are a list marker on their own (`-`, `*`, a bullet, `1.`): the tokens where a different choice
changes the numbers or the plan that follow. `acceptance="exact-numbers"` checks them exactly.
"""

from __future__ import annotations

import re
from typing import Any

_NUMERIC = re.compile(r"[0-9+\-*/=^%<>×÷]")
# word-start markers of byte-level BPE (GPT-2/Qwen: Ġ space, Ċ newline) and SentencePiece (▁)
_MARKS = str.maketrans("", "", "ĠĊ▁ \n\t")
_BULLETS = frozenset({"•", "·", "‣", "–", "—"})
_cache: dict[int, tuple[Any, frozenset[int]]] = {}


def numeric_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of `tokenizer`'s tokens that hold a digit or an operator, or are a bullet (cached per
    tokenizer object). Reads the raw token strings: byte-level BPE and SentencePiece keep ASCII
    digits and operators as themselves."""
    key = id(tokenizer)
    hit = _cache.get(key)
    if hit is not None and hit[0] is tokenizer:
        return hit[1]
    size = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    found = frozenset(i for i, tok in enumerate(tokens)
                      if isinstance(tok, str) and _is_numeric(tok.translate(_MARKS)))
    _cache[key] = (tokenizer, found)
    return found


def _is_numeric(core: str) -> bool:
    return bool(_NUMERIC.search(core)) or core in _BULLETS
