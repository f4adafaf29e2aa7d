from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
warnings.filterwarnings("ignore", message=".*deprecated.*")

from tests.fixtures import load_pair, make_pair_dirs  # noqa: E402


@pytest.fixture(scope="session")
def pair_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Folders of a tiny random draft/target pair with a shared local tokenizer."""
    return make_pair_dirs(Path(tmp_path_factory.mktemp("pair-dirs")))


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any, Any]:
    """(draft_model, draft_tokenizer, target_model, target_tokenizer), float32, random weights."""
    return load_pair(Path(tmp_path_factory.mktemp("pair")))
