"""`benchmarks/gpu/run.sh` end to end on a CPU with --tiny: it skips the wheels and the CUDA tests
when told to, measures, projects, and leaves every output and a summary under $OUT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_run_sh_tiny_on_cpu_writes_every_output(tmp_path: Path) -> None:
    out = tmp_path / "gpu-out"
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable, SPECGUARD_GPU_SKIP_INSTALL="1",
               SPECGUARD_GPU_SKIP_TESTS="1")
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), "--tiny", "--device", "cpu",
         "--pairs", "coder-0.5b/1.5b", "--repeats", "1", "--warmup", "0"],
        env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    summary = (out / "SUMMARY.md").read_text()
    assert proc.returncode == 0, proc.stdout + proc.stderr + summary
    assert "| install | skipped |" in summary and "| CUDA tests | skipped |" in summary
    assert "| costs | ok |" in summary and "| projection | ok |" in summary
    costs = json.loads((out / "costs.json").read_text())
    assert costs["machine"]["tiny"] is True and costs["machine"]["device"] == "cpu"
    projection = json.loads((out / "projection.json").read_text())
    methods = {m for r in projection["results"] for m in r["methods"]}
    assert {"target", "token-sd", "specguard-balanced", "specguard-fast",
            "specguard-paper"} <= methods  # the recorded CPU runs, replayed
    assert "| specguard-balanced |" in (out / "projection.md").read_text()
    assert projection["costs"] == "costs.json" and {r["run"] for r in projection["results"]} == {
        f"benchmarks/results/{run}" for run in ("cascade-gsm8k-cpu1core-run3",
                                                "cascade-math500-cpu1core-run3",
                                                "cascade-gsm8k-cpu1core-run3-paper")}
    assert str(tmp_path) not in (out / "projection.md").read_text()  # no machine paths
    assert "cuda_available False" in (out / "env.txt").read_text() or \
        "cuda_available True" in (out / "env.txt").read_text()
