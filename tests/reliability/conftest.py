"""Shared fixtures of the adversarial suite: one scripted engine per module (building its tokenizer
trains a small BPE, so it is not rebuilt per test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.testing import scripted_engine
from tests.reliability.reliability_helpers import script


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> SpecGuardEngine:
    """A scripted engine whose reply depends on the prompt (see `reliability_helpers.script`)."""
    return scripted_engine(script, tokenizer_dir=Path(tmp_path_factory.mktemp("tok")))
