"""One run at a time per output directory: `out_lock` holds an exclusive `fcntl` lock on
`<out>/.lock` for the whole run, so a second run on the same `--out` (another shell, a CI job)
is a clear error at once instead of two runs appending to one store. The kernel drops the lock
when its process dies, so a killed run never leaves the directory locked.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Concatenate, ParamSpec, Protocol, TypeVar

LOCK = ".lock"
P = ParamSpec("P")
R = TypeVar("R")


class HasOutDir(Protocol):
    @property
    def out_dir(self) -> Path: ...


S = TypeVar("S", bound=HasOutDir)


class OutDirBusy(RuntimeError):
    """Another run holds the output directory."""


@contextmanager
def out_lock(out_dir: Path) -> Iterator[None]:
    """Hold `out_dir`'s run lock (created with the directory); OutDirBusy if another run holds
    it."""
    import fcntl  # POSIX; imported here so that the module imports everywhere

    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / LOCK, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            raise OutDirBusy(f"another run (process {holder or '?'}) is writing to {out_dir}; "
                             "wait for it to end, or use another --out directory") from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def holding_out_dir(run: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """`run(settings, ...)` with `settings.out_dir`'s run lock held throughout (`out_lock`)."""

    @functools.wraps(run)
    def locked(settings: S, *args: P.args, **kwargs: P.kwargs) -> R:
        with out_lock(settings.out_dir):
            return run(settings, *args, **kwargs)

    return locked
