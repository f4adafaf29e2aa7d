"""The resumable results store of a benchmark run (one output directory).

- `results.jsonl`: one `ProblemRow` per (problem, method), appended and flushed as each finishes;
  pairs already present are skipped on the next run (resume), and a pair stored twice counts once.
- `run.json`: the settings that change results (a fingerprint) and a digest of each problem the
  rows answer; a resumed run must match them, and rows without a `run.json` are refused.

Reports name files with `stored_path`: relative, so a stored run carries no machine's paths.

`pending_pairs` lists what is left to run, `iterate_pairs` walks it with a progress bar. Every
file is read through `files` (a damaged one is one `BenchFileError`), and a run holds the
directory's lock (`lock.out_lock`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tqdm.auto import tqdm

from specguard_bench.common.files import load_jsonl, read_json_object
from specguard_bench.common.rows import ProblemRow

T = TypeVar("T")


class HasUid(Protocol):
    """A task of any suite: a problem, a BFCL task, an agent task; `uid` is stable across runs,
    `digest` changes with what the task asks and what counts as right."""

    @property
    def uid(self) -> str: ...

    @property
    def digest(self) -> str: ...


TaskT = TypeVar("TaskT", bound=HasUid)

RESULTS, RUN = "results.jsonl", "run.json"


class ResumeMismatch(RuntimeError):
    """The output directory holds results made with different settings (or unknown ones)."""


def digest(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable `parts` (a task's question and gold)."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


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
    """Rows of a results JSONL file ([] if missing); see `files.load_jsonl`."""
    return load_jsonl(path, ProblemRow.from_dict)


def unique(rows: Iterable[T], key: Callable[[T], Hashable]) -> list[T]:
    """`rows` with each `key` once (its first row): a pair stored twice counts once."""
    seen: dict[Hashable, T] = {}
    for row in rows:
        seen.setdefault(key(row), row)
    return list(seen.values())


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


PER_ENTRY = ("presets", "variants", "problems")


def check_resume(out_dir: Path, fingerprint: Mapping[str, Any], *, run: str = RUN,
                 results: str = RESULTS, tasks: Sequence[HasUid] = ()) -> None:
    """Record `fingerprint` and the `tasks`' digests in `run` (`run.json`), or raise
    ResumeMismatch if the directory already holds `results` (`results.jsonl`) made with
    different settings, or with no `run` to say which. The maps in `PER_ENTRY` (the presets and
    variants of the run's methods, the problems' digests) are compared entry by entry on the
    entries both hold, and recorded merged: a resumed run may add methods or problems, never
    change one."""
    path = out_dir / run
    current = json.loads(json.dumps({**fingerprint, "problems": {t.uid: t.digest for t in tasks}}))
    stored = (out_dir / results).exists()
    if path.exists():
        previous = read_json_object(path)
        for key in PER_ENTRY:
            old, new = previous.get(key), current.get(key)
            if (isinstance(old, dict) and isinstance(new, dict)
                    and all(old[k] == new[k] for k in old.keys() & new.keys())):
                previous[key] = current[key] = {**old, **new}  # agree where both hold: the union
        if previous != current and stored:
            raise ResumeMismatch(f"{out_dir} holds results made with other settings "
                                 f"({_differences(previous, current)}); use a new --out "
                                 "directory or delete it")
    elif stored:
        raise ResumeMismatch(f"{out_dir / results} holds results but {path} is missing, so "
                             "the settings they were made with are unknown; use a new --out "
                             "directory or delete it")
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(current, indent=2) + "\n")


def _differences(previous: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """What differs between two fingerprints: the settings, and the problems that changed."""
    keys = sorted(k for k in {*previous, *current} if previous.get(k) != current.get(k))
    parts = [f"{', '.join(k for k in keys if k != 'problems')} differ"] if keys != ["problems"] \
        else []
    old, new = previous.get("problems"), current.get("problems")
    if "problems" in keys and isinstance(old, dict) and isinstance(new, dict):
        changed = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        parts.append(f"problem {', '.join(changed[:3])}{more} changed since its rows were "
                     "written")
    elif "problems" in keys:
        parts.append("the problems they answer are not recorded")
    return "; ".join(parts)


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
