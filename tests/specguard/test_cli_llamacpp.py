"""`specguard run --backend llama.cpp` on tiny GGUF files: the trace, with the command's
transformers defaults (its --dtype) left out, and a transformers-only flag refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.cli import main
from tests.specguard_core.engine.sd_helpers import noisy_copy_pair
from tests.specguard_core.llamacpp.gguf_models import gguf_pair, needs_llama_cpp

pytestmark = needs_llama_cpp


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("gguf")
    return gguf_pair(root, noisy_copy_pair(root / "hf"))


def test_run_on_llama_cpp_prints_a_trace(files: tuple[Path, Path],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "What is 3 + 4?", "--draft", str(files[0]), "--target", str(files[1]),
                 "--backend", "llama.cpp", "--context-size", "512", "--max-new-tokens", "12"])
    out = capsys.readouterr().out
    assert code == 0 and "#0" in out and "summary" in out


def test_a_transformers_only_flag_is_refused_on_llama_cpp(
        files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "Hi", "--draft", str(files[0]), "--target", str(files[1]),
                 "--backend", "llama.cpp", "--dtype", "float32"])
    assert code == 2
    assert "dtype applies to the transformers backend" in capsys.readouterr().err
