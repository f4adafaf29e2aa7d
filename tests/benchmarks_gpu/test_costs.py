"""`benchmarks/gpu/costs.py --tiny`: every measured shape lands in costs.json in the schema
`project.py` reads, on each test device; a spent time budget is recorded, not hidden."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmarks.gpu import costs
from benchmarks.gpu.models import DEFAULT_PAIR, PAIRS, ModelSpec
from benchmarks.gpu.replay import ModelCosts

QUICK = ["--tiny", "--pairs", DEFAULT_PAIR, "--repeats", "1", "--warmup", "0"]


def _positive_table(table: dict[str, dict[str, float]], contexts: list[int], sizes: list[int]) -> None:
    assert sorted(int(c) for c in table) == contexts
    for row in table.values():
        assert sorted(int(n) for n in row) == sizes
        assert all(isinstance(s, float) and s > 0 for s in row.values())


def test_tiny_costs_have_the_schema_project_reads(tmp_path: Path, device: str) -> None:
    # on a CPU the static-cache pass runs eager (quick); on a GPU it would compile: left out here
    static = ["--compile"] if device == "cpu" else ["--no-compile"]
    assert costs.main([*QUICK, "--device", device, "--out", str(tmp_path), *static]) == 0
    report = json.loads((tmp_path / "costs.json").read_text())
    assert report["schema"] == costs.SCHEMA
    m = report["machine"]
    assert m["device"] == device and m["tiny"] is True and m["dtype"] == "bfloat16"
    assert m["timer"] == ("cuda-events" if device == "cuda" else "perf_counter")
    assert report["pairs"] == {DEFAULT_PAIR: dict(draft=PAIRS[DEFAULT_PAIR][0],
                                                  target=PAIRS[DEFAULT_PAIR][1])}
    grid = costs.TINY_GRID
    assert set(report["models"]) == set(PAIRS[DEFAULT_PAIR])
    for entry in report["models"].values():
        assert entry["params"] > 0 and entry["layers"] == 2 and entry["skipped"] == []
        eager = entry["eager"]
        _positive_table(eager["decode"], grid["contexts"], grid["rows"])
        _positive_table(eager["pass"], grid["contexts"], grid["pass_tokens"])
        _positive_table(eager["propose_per_token"], grid["contexts"], grid["propose_rows"])
        assert sorted(int(p) for p in eager["prefill"]) == grid["prefill"]
        modes = ["eager"]
        if device == "cpu":
            assert entry["static"]["errors"] == {} and entry["static"]["compiled"] is False
            _positive_table(entry["static"]["decode"], grid["contexts"], [1])
            modes.append("static")
        for mode in modes:  # what project.py builds from it
            assert ModelCosts(entry, mode).decode(24, 2) > 0
    assert "# Forward costs" in (tmp_path / "costs.md").read_text()


def test_a_spent_time_budget_is_recorded_in_the_output(tmp_path: Path) -> None:
    assert costs.main([*QUICK, "--device", "cpu", "--out", str(tmp_path), "--budget-s", "1e-6"]) == 0
    models = json.loads((tmp_path / "costs.json").read_text())["models"]
    assert all(e["skipped"] == ["every measurement: time budget"] for e in models.values())
    with pytest.raises(ValueError, match="no eager decode costs"):
        ModelCosts(next(iter(models.values())))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        costs.main(["--device", "cuda"])
    assert "torch sees no GPU; use --device cpu" in capsys.readouterr().err


def test_a_model_that_fails_is_recorded_and_the_others_still_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = costs.build
    target = PAIRS[DEFAULT_PAIR][1]

    def build(spec: ModelSpec, device: str, dtype: torch.dtype) -> Any:
        if spec.name == target:
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(spec, device, dtype)

    monkeypatch.setattr(costs, "build", build)
    assert costs.main([*QUICK, "--device", "cpu", "--out", str(tmp_path)]) == 0
    models = json.loads((tmp_path / "costs.json").read_text())["models"]
    assert models[target]["error"] == "RuntimeError: CUDA out of memory (simulated)"
    assert models[PAIRS[DEFAULT_PAIR][0]]["eager"]["decode"]
    assert "out of memory (simulated)" in (tmp_path / "costs.md").read_text()
