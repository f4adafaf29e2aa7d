"""Concurrency safety of the model cache: one writer per bundle at a time, and the leftovers of
interrupted writers cleared.

`bundle_lock` is an exclusive `fcntl` file lock on `<root>/.locks/<bundle>.lock`, held while a
fetch checks, downloads, assembles or converts that bundle: two `specguard models fetch` runs of
one model (two shells, two CI jobs on one cache) take turns, and the second finds the first's
verified result instead of writing over it. The kernel drops the lock when its process dies, so a
killed fetch never leaves the cache locked. Different bundles are fetched in parallel.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tqdm.auto import tqdm

STALE_S = 24 * 3600  # a download folder in the cache root (older releases) older than this is gone
DOWNLOAD_PREFIX = ".download-"
PARTIAL_SUFFIX = ".partial"


@contextmanager
def bundle_lock(name: str, root: Path) -> Iterator[None]:
    """Hold the cache's lock for the bundle `name` (blocking; says so on stderr when another
    process holds it)."""
    import fcntl  # POSIX; imported here so that the module imports everywhere

    folder = root / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.lock", "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            tqdm.write(f"{name}: another fetch of this model is running; waiting for it ...",
                       file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def clear_leftovers(gguf_dir: Path, hf_folder: Path) -> None:
    """Remove what interrupted writers of one bundle left (call with its `bundle_lock` held, so
    no live writer owns them): download folders and partial files next to the GGUF, partial
    folders next to the converted folder."""
    for leftover in [*_matching(gguf_dir, f"{DOWNLOAD_PREFIX}*"),
                     *_matching(gguf_dir, f"*{PARTIAL_SUFFIX}"),
                     *_matching(hf_folder.parent, f"{hf_folder.name}{PARTIAL_SUFFIX}"),
                     *_matching(hf_folder.parent, f".{hf_folder.name}.*{PARTIAL_SUFFIX}")]:
        _remove(leftover)


def clear_stale_root_downloads(root: Path, older_than_s: float = STALE_S) -> None:
    """Remove download folders in the cache root (where earlier releases put them) that no fetch
    has touched for `older_than_s`: a live one is refreshed while its wheels arrive."""
    cutoff = time.time() - older_than_s
    for leftover in _matching(root, f"{DOWNLOAD_PREFIX}*"):
        try:
            if leftover.stat().st_mtime < cutoff:
                _remove(leftover)
        except FileNotFoundError:
            pass


def _matching(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern)) if folder.is_dir() else []


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
