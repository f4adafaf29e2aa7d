from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
warnings.filterwarnings("ignore", message=".*deprecated.*")

from tests.fixtures import DEVICES, load_pair, make_pair_dirs, on_device  # noqa: E402


@pytest.fixture(scope="session")
def pair_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Folders of a tiny random draft/target pair with a shared local tokenizer."""
    return make_pair_dirs(Path(tmp_path_factory.mktemp("pair-dirs")))


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any, Any]:
    """(draft_model, draft_tokenizer, target_model, target_tokenizer), float32, random weights."""
    return load_pair(Path(tmp_path_factory.mktemp("pair")))


@pytest.fixture(scope="session", params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """Each device the engine runs on here: "cpu" always, "cuda" when torch sees a GPU. Tests that
    take it (directly or through `tiny_pair_on` / `noisy_pair_on`) get ids ending in [cpu] and
    [cuda]; `pytest -k cuda` runs the GPU half (benchmarks/gpu/run.sh does)."""
    return str(request.param)


@pytest.fixture(scope="session")
def tiny_pair_on(device: str, tmp_path_factory: pytest.TempPathFactory,
                 request: pytest.FixtureRequest) -> tuple[Any, Any, Any, Any]:
    """`tiny_pair` on `device`: the session's CPU pair itself on "cpu", a copy of it elsewhere."""
    if device == "cpu":
        return request.getfixturevalue("tiny_pair")
    return on_device(load_pair(Path(tmp_path_factory.mktemp(f"pair-{device}"))), device)


@pytest.fixture(scope="session")
def noisy_pair_on(device: str, tmp_path_factory: pytest.TempPathFactory
                  ) -> tuple[Any, Any, Any, Any]:
    """The partly disagreeing pair of `engine/sd_helpers.noisy_copy_pair`, on `device`."""
    from tests.specguard_core.engine.sd_helpers import noisy_copy_pair

    return on_device(noisy_copy_pair(tmp_path_factory.mktemp(f"noisy-{device}")), device)
