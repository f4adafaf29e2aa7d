from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tests.fixtures import load_pair  # noqa: E402


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any, Any]:
    """(draft_model, draft_tokenizer, target_model, target_tokenizer), float32, random weights."""
    return load_pair(Path(tmp_path_factory.mktemp("pair")))
