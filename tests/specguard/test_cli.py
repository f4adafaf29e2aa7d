"""`specguard run` end to end on a tiny local pair (no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.cli import main


def test_run_prints_a_trace_and_summary(pair_dirs: tuple[Path, Path],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    draft, target = pair_dirs
    code = main(["run", "What is 3 + 4?", "--draft", str(draft), "--target", str(target),
                 "--dtype", "float32", "--device", "cpu", "--max-new-tokens", "12",
                 "--set", "max_step_tokens=4", "--set", "tau=0.5"])
    out = capsys.readouterr().out
    assert code == 0
    labels = ("draft kept", "draft checked", "target +", "target regen")
    assert "#0" in out and any(label in out for label in labels)
    assert "summary" in out and "acceptance" in out and "prefilled draft" in out


def test_run_json(pair_dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    draft, target = pair_dirs
    assert main(["run", "Hi", "--draft", str(draft), "--target", str(target), "--dtype",
                 "float32", "--device", "cpu", "--max-new-tokens", "6", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["usage"]["completion_tokens"] == 6 and result["finish_reason"] == "length"


def test_missing_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "Hi", "--draft", "./nope", "--target", "./nope"]) == 2
    assert "does not exist" in capsys.readouterr().err
