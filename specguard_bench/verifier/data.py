"""Step-labelled solutions (ProcessBench format, described by `steps_README.md` beside the dev file
`steps_dev.jsonl` in the project's shared data folder): reading and checking them, with errors that
name the line and the field.

One JSON object per line: `id`, `source`, `problem`, `steps` (list of str), `labels` (one per step:
1 correct, 0 wrong, null unlabelled); `problem_ref` groups solutions of the same problem (falls back
to `id`). Other fields are kept but not needed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class LabelledDataError(ValueError):
    """A labelled file that cannot be used; the message names the line and the field."""


@dataclass(frozen=True)
class LabelledSolution:
    """One solution: `steps[i]` has `labels[i]` (1, 0 or None)."""

    line: int  # 1-based line number in the file
    id: str
    source: str
    problem: str
    steps: tuple[str, ...]
    labels: tuple[int | None, ...]
    problem_ref: str

    @property
    def dataset(self) -> str:
        """`gsm8k` / `math` from `processbench/gsm8k`; the source itself otherwise."""
        return self.source.rsplit("/", 1)[-1]


def _field(row: dict[str, Any], name: str, kind: type, line: int, path: Path) -> Any:
    if name not in row:
        raise LabelledDataError(f"{path}:{line}: missing field {name!r}")
    value = row[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise LabelledDataError(f"{path}:{line}: field {name!r} must be a {kind.__name__}, "
                                f"got {type(value).__name__}")
    return value


def parse_line(text: str, line: int, path: Path) -> LabelledSolution:
    """One checked solution from one line of the file."""
    try:
        row = json.loads(text)
    except json.JSONDecodeError as err:
        raise LabelledDataError(f"{path}:{line}: not valid JSON ({err.msg})") from None
    if not isinstance(row, dict):
        raise LabelledDataError(f"{path}:{line}: expected a JSON object, got {type(row).__name__}")
    sid = _field(row, "id", str, line, path)
    source = _field(row, "source", str, line, path)
    problem = _field(row, "problem", str, line, path)
    steps = _field(row, "steps", list, line, path)
    labels = _field(row, "labels", list, line, path)
    for i, step in enumerate(steps):
        if not isinstance(step, str):
            raise LabelledDataError(f"{path}:{line}: field 'steps'[{i}] must be a str, "
                                    f"got {type(step).__name__}")
    for i, label in enumerate(labels):
        if label not in (0, 1, None) or isinstance(label, (bool, float)):
            raise LabelledDataError(f"{path}:{line}: field 'labels'[{i}] must be 1, 0 or null, "
                                    f"got {label!r}")
    if len(steps) != len(labels):
        raise LabelledDataError(f"{path}:{line}: field 'labels' has {len(labels)} entries but "
                                f"'steps' has {len(steps)}; give one label per step")
    ref = row.get("problem_ref", sid)
    if not isinstance(ref, str):
        raise LabelledDataError(f"{path}:{line}: field 'problem_ref' must be a str, "
                                f"got {type(ref).__name__}")
    return LabelledSolution(line, sid, source, problem, tuple(steps), tuple(labels), ref)


def data_ref(path: str | Path) -> str:
    """How feature caches, reports and cards name a labelled file: its name and the start of its
    content's sha256 (`steps_dev.jsonl@sha256:0123456789abcdef`), never a machine's path to it."""
    path = Path(path)
    return f"{path.name}@sha256:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"


def load_labelled(path: str | Path, limit: int | None = None) -> list[LabelledSolution]:
    """The first `limit` (all when None) solutions of a labelled JSONL file, each checked."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"labelled file {path} not found")
    out: list[LabelledSolution] = []
    with path.open(encoding="utf-8") as fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            out.append(parse_line(text, line, path))
            if limit is not None and len(out) >= limit:
                break
    if not out:
        raise LabelledDataError(f"{path}: no solutions in the file")
    return out
