"""Checks on what a remote client sends, before it reaches the engine, and the scrubbing of what
goes back out. Pure functions, no I/O but `card_path` (a file test in the operator's folder).

Every check walks its value iteratively (any depth is safe to check) and answers in words that
name the place and the rule, never the value: a client-visible message must not echo input,
file contents or credentials.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MAX_DEPTH = 64  # a deeper request body is refused (nothing real nests deeper; recursive
# consumers — pydantic, jsonschema, chat templates — would hit Python's recursion limit)
_CARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@]*@")


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.,\[\]-]{0,63}")  # no spaces, quotes or markup


def safe_name(part: str | int) -> str:
    """A place in a request body as a message may show it: an index or a plain name (letters,
    digits, `_.,[]-`; at most 64) as is, any other key (a client's text) as "(key)"."""
    return str(part) if isinstance(part, int) or _NAME.fullmatch(part) else "(key)"


def _where(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        name = safe_name(part)
        out += f"[{name}]" if isinstance(part, int) else f".{name}" if out else name
    return out or "the request body"


def body_problem(value: Any, limit: int = MAX_DEPTH) -> tuple[str, str | None] | None:
    """(why, where) if the decoded JSON body `value` nests deeper than `limit` or holds a string
    (or key) that does not encode to UTF-8 (a lone surrogate from an escape such as \\ud800)."""
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            if not encodes(item):
                where = _where(path)
                return (f"{where} is not valid Unicode: it holds an unpaired surrogate (an escape "
                        "such as \\ud800 without its pair); send UTF-8 text", where)
        elif isinstance(item, (dict, list)):
            if depth > limit:
                return (f"the request body is nested deeper than {limit} levels; flatten it",
                        _where(path[:1]) if path else None)
            if isinstance(item, dict):
                for key, child in item.items():
                    stack.append((key, depth, path))
                    stack.append((child, depth + 1, (*path, str(key))))
            else:
                stack.extend((child, depth + 1, (*path, i)) for i, child in enumerate(item))
    return None


def card_path(name: str, folder: Path | None) -> Path | None:
    """The verifier card `name` (a bare file name, with or without `.json`) in the operator's
    `folder`, or None when there is no folder, the name is not a bare name, or no such card."""
    if folder is None or not _CARD_NAME.fullmatch(name):
        return None
    path = folder / (name if name.endswith(".json") else f"{name}.json")
    return path if path.is_file() else None


def card_names(folder: Path | None, limit: int = 20) -> list[str]:
    """The card names a client may send (the stems of `folder`'s .json files), at most `limit`."""
    if folder is None or not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json") if _CARD_NAME.fullmatch(p.stem))[:limit]


def encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encodable(text: str) -> str:
    """`text` as is when it encodes to UTF-8, else with every lone surrogate replaced by U+FFFD
    (model output is untrusted: a tool call may decode `\\ud800` into one)."""
    if encodes(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def redact(text: str) -> str:
    """`text` with the user:password part of every URL removed (a served target's URL may carry
    credentials: `http://user:key@host/v1`)."""
    return _CREDENTIALS.sub(r"\1", text)
