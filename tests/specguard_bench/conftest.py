"""The tiny random draft/target pair (the one builder, `tests.fixtures.make_pair_dirs`), and
single-threaded torch for the bench tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.fixtures import make_pair_dirs


@pytest.fixture(scope="session")
def bench_pair_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(draft_dir, target_dir): float32 random Qwen2 models sharing one tokenizer."""
    return make_pair_dirs(tmp_path_factory.mktemp("bench_pair"), max_positions=2048)


@pytest.fixture(autouse=True)
def single_thread() -> Iterator[None]:
    """Tiny models run fastest on one intra-op thread (on a loaded 2-core box, OpenMP spinning
    made these tests ~20x slower); the previous setting is restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
