"""What a vocabulary's tokens hold (torch-free).

- `token_bytes`: the bytes a token stands for, read from its vocabulary entry when its decoded
  text lost some.
- `numeric_ids`: the vocabulary's tokens that hold a digit, an arithmetic or comparison operator,
  or are a list marker on their own (`-`, `*`, a bullet, `1.`): the tokens where a different
  choice changes the numbers or the plan that follow. `acceptance="exact-numbers"` checks them
  exactly.
"""

from __future__ import annotations

import functools
import re
from typing import Any

__all__ = ["numeric_ids", "token_bytes"]

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # SentencePiece byte fallback


def token_bytes(tokenizer: Any, token: int, text: str) -> bytes:
    """The bytes one token stands for: its decoded `text` in UTF-8, unless that text lost part of
    a multi-byte character ("\\ufffd"); then the token's own bytes, read from its vocabulary
    entry (byte-level BPE's alphabet, or SentencePiece's `<0xNN>`)."""
    if "\ufffd" not in text:
        return text.encode("utf-8")
    piece = tokenizer.convert_ids_to_tokens(token)
    if isinstance(piece, str):
        if match := _BYTE_TOKEN.match(piece):
            return bytes([int(match.group(1), 16)])
        byte_of = _byte_level_alphabet()
        if all(ch in byte_of for ch in piece):
            return bytes(byte_of[ch] for ch in piece)
    return text.encode("utf-8")


@functools.cache
def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's printable stand-in character -> the byte it stands for."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {ch: b for b, ch in bytes_to_unicode().items()}


_NUMERIC = re.compile(r"[0-9+\-*/=^%<>×÷]")
# word-start markers of byte-level BPE (GPT-2/Qwen: Ġ space, Ċ newline) and SentencePiece (▁)
_MARKS = str.maketrans("", "", "ĠĊ▁ \n\t")
_BULLETS = frozenset({"•", "·", "‣", "–", "—"})

def numeric_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of `tokenizer`'s tokens that hold a digit or an operator, or are a bullet (the
    `exact-numbers` rule builds its mask from them once per engine). Reads the raw token strings:
    byte-level BPE and SentencePiece keep ASCII digits and operators as themselves."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return frozenset(i for i, tok in enumerate(tokens)
                     if isinstance(tok, str) and _is_numeric(tok.translate(_MARKS)))


def _is_numeric(core: str) -> bool:
    return bool(_NUMERIC.search(core)) or core in _BULLETS
