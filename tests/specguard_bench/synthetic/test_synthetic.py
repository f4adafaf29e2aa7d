"""The synthetic mode end to end on the tiny random-weight pair, through the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

from specguard_bench.cli.parsers import main


def test_synthetic_mode(tmp_path: Path) -> None:
    argv = [
        "bench",
        "--synthetic",
        "--synthetic-size",
        "tiny",
        "--synthetic-prompts",
        "1",
        "--ks",
        "1,2",
        "--acceptance",
        "0.5,1.0",
        "--device",
        "cpu",
        "--no-progress",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    report = json.loads((tmp_path / "synthetic.json").read_text())
    steps, step_tokens = report["steps"], report["step_tokens"]
    assert report["new_tokens"] == steps * step_tokens
    assert [r["k"] for r in report["k_sweep"]] == [1, 2]
    for r in report["k_sweep"]:
        assert r["steps_per_run"] == steps and r["achieved"] == 1.0  # fixed-length steps
    full = report["acceptance"][1]
    assert full["requested"] == 1.0 and full["tau"] == -math.inf and full["achieved"] == 1.0
    assert 0.0 <= report["acceptance"][0]["achieved"] <= 1.0
    sweep = report["capture"]["layers_sweep"]
    assert sweep[0]["grounding_layers"] == 0 and len(sweep) >= 2  # capture off, then on
    assert report["target_latency_s"] > 0 and (tmp_path / "synthetic.png").stat().st_size > 0
