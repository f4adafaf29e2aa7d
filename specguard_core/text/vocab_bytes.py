"""The bytes a token stands for, read from its vocabulary entry when its decoded text lost some."""

from __future__ import annotations

import functools
import re
from typing import Any

__all__ = ["token_bytes"]

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
