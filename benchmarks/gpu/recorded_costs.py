"""The CPU costs `benchmarks/batch_forward.py` recorded (one core, bf16, the real default pair), in
`costs.py`'s costs.json schema, for the calibration of `project.py --check-against`.

batch_forward measured one request's decode and verification passes (8 tokens, and 32 in its
`verify32` run) at a 150-token context, and batched decodes of 2 / 4 / 8 rows (contexts 150 to 400;
taken here as rows of one 150-token context). It did not time the proposal loop or a prompt
prefill: the replay then charges a decode per proposed token and a pass for a prefill.

    python -m benchmarks.gpu.recorded_costs  # writes benchmarks/gpu/cpu1core-recorded-costs.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "benchmarks" / "results" / "batch-forward-cpu1core"
OUT = Path(__file__).resolve().parent / "cpu1core-recorded-costs.json"
NAMES = {"Qwen/Qwen2.5-Coder-0.5B-Instruct": "coder-0.5b",
         "Qwen/Qwen2.5-Coder-1.5B-Instruct": "coder-1.5b"}


def convert(recorded: list[dict[str, Any]]) -> dict[str, Any]:
    """costs.json of batch_forward.json files (the first one's machine)."""
    models: dict[str, Any] = {}
    for data in recorded:
        ctx = str(min(data["lengths"]))
        for res in data["results"]:
            name = NAMES.get(res["model"])
            if name is None:
                continue
            entry = models.setdefault(name, dict(config=f"batch_forward: {res['model']}",
                                                 eager=dict(decode={ctx: {}}, pass_={ctx: {}})))
            eager = entry["eager"]
            for row in res["rows"]:
                kind, tokens = row["pass_"].split()[:2]
                if kind == "decode":
                    eager["decode"][ctx]["1"] = row["solo_one_s"]
                    eager["decode"][ctx][str(row["n"])] = row["batched_s"]
                elif row["n"] == 1:
                    eager["pass_"][ctx][tokens] = row["solo_one_s"]
    for entry in models.values():
        entry["eager"]["pass"] = entry["eager"].pop("pass_")
    machine = dict(recorded[0]["machine"], device="cpu",
                   device_name=f"{recorded[0]['machine']['cpu']} (recorded by batch_forward.py)",
                   tiny=False, timer="perf_counter")
    return dict(schema="specguard-gpu-costs/1", machine=machine, models=models,
                pairs={"coder-0.5b/1.5b": dict(draft="coder-0.5b", target="coder-1.5b")})


def main() -> int:
    files = [SOURCE / "batch_forward.json", SOURCE / "verify32" / "batch_forward.json"]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        print(f"error: missing {missing} (run benchmarks/batch_forward.py first)", file=sys.stderr)
        return 1
    OUT.write_text(json.dumps(convert([json.loads(f.read_text()) for f in files]), indent=2) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
