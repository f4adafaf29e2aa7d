"""Reading the files a benchmark run trusts: its own store (`results.jsonl`, `run.json`, the
last summary) and the data files it is given. Each is checked as it is read, and whatever is
wrong with it is one `BenchFileError` naming the file and, for a JSON-lines file, the line
(`<file>:<line>: <what is wrong>`), which the CLI prints as one `error:` line: a benchmark never
reads a damaged file as if it were whole, and never stops with a traceback over one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

T = TypeVar("T")


class BenchFileError(ValueError):
    """A file the run reads is damaged or not in its format; the message names it (and the
    line) and says what is wrong."""


def one_line(err: Exception) -> str:
    """`err`'s message on one line (a pydantic error lists each field's problem)."""
    if isinstance(err, ValidationError):
        found = [f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}"
                 for e in err.errors(include_url=False)]
        more = f"; and {len(found) - 3} more" if len(found) > 3 else ""
        return "; ".join(found[:3]) + more
    if isinstance(err, KeyError):
        return f"missing field {err.args[0]!r}" if err.args else "a field is missing"
    return " ".join(str(err).split()) or type(err).__name__


def read_text(path: Path) -> str:
    """The UTF-8 text of `path`; a file that is not UTF-8 is a BenchFileError."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise BenchFileError(f"{path}:{line}: not UTF-8 text (byte {data[err.start]:#04x}); "
                             "save it as UTF-8") from None


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path` (UTF-8); anything else is a BenchFileError."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise BenchFileError(f"{path}: not valid JSON ({one_line(err)})") from None
    if not isinstance(data, dict):
        raise BenchFileError(f"{path}: holds a JSON {type(data).__name__}, not an object")
    return data


def load_jsonl(path: Path, parse: Callable[[Any], T]) -> list[T]:
    """`parse` of each line of a JSONL file ([] if missing; blank lines skipped). A truncated
    last line (a run killed while writing) is skipped. Any other line that is not JSON, or that
    `parse` refuses (ValueError, TypeError, KeyError), is a BenchFileError naming its line."""
    if not path.exists():
        return []
    lines = read_text(path).splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError) as err:
            if i == last and isinstance(err, json.JSONDecodeError):
                break
            raise BenchFileError(f"{path}:{i + 1}: not valid JSON ({one_line(err)})") from None
        try:
            out.append(parse(data))
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise BenchFileError(f"{path}:{i + 1}: {one_line(err)}") from None
    return out


def json_object(data: Any) -> dict[str, Any]:
    """`data` when it is a JSON object (a parse for `load_jsonl`), else a ValueError."""
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    return data
