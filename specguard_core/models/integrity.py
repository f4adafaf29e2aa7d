"""Whether a converted model folder is whole, checked cheaply or by hash.

A folder counts as whole when it has a config, weights and a tokenizer, every safetensors file
(single or sharded) is as long as its own header says, and every file its manifest
(`specguard-manifest.json`, written when the folder was converted: the size and sha256 of each
file) lists has the recorded size (`folder_problem`, `weights_problem`: no file is hashed).
`verify_folder` also hashes every file against the manifest. Nothing here touches the network.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = "specguard-manifest.json"  # {"files": {relative path: {"size", "sha256"}}}
_CHUNK = 1 << 24  # hashing block size


def sha256_file(path: Path, progress: bool = False) -> str:
    """Hex sha256 of a file, read in 16 MiB blocks (with a byte progress bar if asked)."""
    from tqdm.auto import tqdm

    digest = hashlib.sha256()
    with (
        open(path, "rb") as src,
        tqdm(total=path.stat().st_size, unit="B", unit_scale=True, desc=f"verify {path.name}",
             disable=not progress, leave=False) as bar,
    ):
        while block := src.read(_CHUNK):
            digest.update(block)
            bar.update(len(block))
    return digest.hexdigest()


def _safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file is not whole (its size must be 8 + header + the end of the last
    tensor the header declares), or None. Reads only the header, so it is cheap."""
    if not path.is_file():
        return f"{path.name} is missing"
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if size < 8 or n > size - 8:
                return f"{path.name} is truncated ({size} bytes)"
            header = json.loads(f.read(n))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
                  default=0)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return f"{path.name} has a corrupt header"
    if 8 + n + end != size:
        why = "truncated" if size < 8 + n + end else "corrupt: bytes past the last tensor"
        return f"{path.name} has {size} bytes but its header describes {8 + n + end} ({why})"
    return None


def weights_problem(folder: Path) -> str | None:
    """Why the weights of a model folder are not whole, or None: every safetensors file (single or
    sharded) must match its own header, and every file the folder's manifest (written when it was
    converted) lists must have the recorded size. Cheap: no file is hashed (see `verify_folder`)."""
    index = folder / "model.safetensors.index.json"
    try:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values())) \
            if index.is_file() else [p.name for p in sorted(folder.glob("*.safetensors"))]
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{index.name} is corrupt"
    for shard in shards:
        if problem := _safetensors_problem(folder / shard):
            return problem
    for name, entry in _manifest(folder).items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != entry.get("size"):
            return f"{name} has {path.stat().st_size} bytes, {entry.get('size')} were recorded"
    return None


def _manifest(folder: Path) -> dict[str, dict[str, object]]:
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(files, dict):
        return {}
    return {str(k): v if isinstance(v, dict) else {} for k, v in files.items()}


def folder_problem(folder: Path) -> str | None:
    """Why `folder` is not a complete converted model (config, weights, tokenizer; weights whole,
    see `weights_problem`), or None."""
    if not folder.is_dir():
        return "not cached"
    weights = (folder / "model.safetensors").is_file() or (
        folder / "model.safetensors.index.json"
    ).is_file()
    tokenizer = (folder / "tokenizer.json").is_file() or (
        folder / "tokenizer_config.json"
    ).is_file()
    if not ((folder / "config.json").is_file() and weights and tokenizer):
        return "incomplete (config, weights or tokenizer missing)"
    return weights_problem(folder)


def is_converted(folder: Path) -> bool:
    """True if `folder` holds a complete converted model whose weights are whole."""
    return folder_problem(folder) is None


def write_manifest(folder: Path, progress: bool = False) -> None:
    """Record the size and sha256 of every file in `folder` (what `verify_folder` checks)."""
    files = {str(p.relative_to(folder)): {"size": p.stat().st_size,
                                          "sha256": sha256_file(p, progress)}
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps({"files": files}, indent=1) + "\n")


def verify_folder(folder: Path, progress: bool = False) -> str | None:
    """`folder_problem`, then every file's sha256 against the manifest; None if all is well.
    A folder without a manifest (converted before manifests existed) gets one recorded now."""
    if problem := folder_problem(folder):
        return problem
    files = _manifest(folder)
    if not files:
        write_manifest(folder, progress)
        return None
    for name, entry in files.items():
        if sha256_file(folder / name, progress) != entry.get("sha256"):
            return f"{name} does not match its recorded sha256"
    return None
