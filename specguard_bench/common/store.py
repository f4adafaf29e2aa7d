"""The resumable results store of a benchmark run (one output directory).

- `results.jsonl`: one `ProblemRow` per (problem, method), appended and flushed as each finishes;
  pairs already present are skipped on the next run (resume).
- `run.json`: the settings that change results (a fingerprint); a resumed run must match them.

Reports name files with `stored_path`: relative, so a stored run carries no machine's paths.

`pending_pairs` lists what is left to run, `iterate_pairs` walks it with a progress bar.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tqdm.auto import tqdm

from specguard_bench.common.rows import ProblemRow

T = TypeVar("T")


class HasUid(Protocol):
    """A task of any suite: a problem, a BFCL task, an agent task; `uid` is stable across runs."""

    @property
    def uid(self) -> str: ...


TaskT = TypeVar("TaskT", bound=HasUid)

RESULTS, RUN = "results.jsonl", "run.json"


class ResumeMismatch(RuntimeError):
    """The output directory holds results made with different settings."""


def stored_path(path: str | Path) -> str:
    """`path` as a stored report names it, never as a machine's absolute path: as given when
    relative; relative to the working directory (the repository, for a run started from its root)
    when it lies under it; else its name alone."""
    given = Path(path)
    if not given.is_absolute():
        return given.as_posix()
    try:
        return given.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return given.name


def load_rows(path: Path) -> list[ProblemRow]:
    """Rows of a results JSONL file ([] if missing); see `load_jsonl`."""
    return load_jsonl(path, ProblemRow.from_dict)


def load_jsonl(path: Path, parse: Callable[[dict[str, Any]], T]) -> list[T]:
    """`parse` of each line of a JSONL file ([] if missing; blank lines skipped). A truncated last
    line (a run killed while writing) is skipped; any other bad line raises ValueError."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(parse(json.loads(line)))
        except json.JSONDecodeError:
            if i == last:
                break
            raise ValueError(f"{path}:{i + 1} is not valid JSON") from None
    return out


def append_row(path: Path, row: ProblemRow) -> None:
    """Append one row as a JSON line and flush it to disk."""
    append_json(path, row.to_dict())


def append_json(path: Path, data: Mapping[str, Any]) -> None:
    """Append `data` as one JSON line and flush it to disk. A last line cut short (a run killed
    while writing; `load_rows` skips it) is dropped first, so it cannot swallow this line."""
    with open(path, "a+b") as out:
        if out.tell() > 0 and (out.seek(-1, os.SEEK_END), out.read(1))[1] != b"\n":
            out.seek(0)
            out.truncate(out.read().rfind(b"\n") + 1)
        out.write((json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8"))
        out.flush()
        os.fsync(out.fileno())


PER_METHOD = ("presets", "variants")


def check_resume(out_dir: Path, fingerprint: Mapping[str, Any], *, run: str = RUN,
                 results: str = RESULTS) -> None:
    """Record `fingerprint` in `run` (`run.json`), or raise ResumeMismatch if the directory
    already holds `results` (`results.jsonl`) made with different settings. The maps in
    `PER_METHOD` (the presets and variants of the run's methods) are compared entry by entry on the
    entries both hold, and recorded merged: a resumed run may add methods, never change one."""
    path = out_dir / run
    current = json.loads(json.dumps(fingerprint))  # normalise tuples, floats as JSON sees them
    if path.exists():
        previous = json.loads(path.read_text())
        for key in PER_METHOD:
            old, new = previous.get(key), current.get(key)
            if (isinstance(old, dict) and isinstance(new, dict)
                    and all(old[k] == new[k] for k in old.keys() & new.keys())):
                previous[key] = current[key] = {**old, **new}  # agree where both hold: the union
        if previous != current and (out_dir / results).exists():
            diff = sorted(k for k in {*previous, *current} if previous.get(k) != current.get(k))
            raise ResumeMismatch(
                f"{out_dir} holds results made with other settings ({', '.join(diff)} differ); "
                "use a new --out directory or delete it"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n")


def pending_pairs(
    problems: Sequence[TaskT], methods: Sequence[str], done: set[tuple[str, str]]
) -> list[tuple[TaskT, str]]:
    """The (problem, method) pairs still to run, problem by problem, methods rotated per problem."""
    pairs = []
    for pos, problem in enumerate(problems):
        shift = pos % len(methods)
        for method in (*methods[shift:], *methods[:shift]):
            if (problem.uid, method) not in done:
                pairs.append((problem, method))
    return pairs


def iterate_pairs(pairs: list[tuple[TaskT, str]], progress: bool, desc: str = "bench"
                  ) -> Iterator[tuple[TaskT, str]]:
    """The (task, method) pairs with a progress bar (`desc`) showing the current pair."""
    with tqdm(total=len(pairs), desc=desc, unit="run", disable=not progress) as bar:
        for problem, method in pairs:
            bar.set_postfix_str(f"{problem.uid} {method}")
            yield problem, method
            bar.update(1)
