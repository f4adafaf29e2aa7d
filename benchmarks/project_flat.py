"""A projection, not a measurement: what each method measured by `tune_llamacpp.py` would take
where a forward over n new tokens costs what a forward over one does (memory-bound hardware: a
GPU, a many-core CPU, Apple silicon), from the forwards each method made and the one-token costs
of `forward_curve.py`.

    .venv/bin/python benchmarks/project_flat.py \\
        --runs benchmarks/results/tune-llamacpp/*.jsonl \\
        --curve benchmarks/results/forward-curve-xeon/curve.json

For each method: measured seconds, then projected seconds = sum over its forwards of that model's
one-token cost, each against llama.cpp alone (`target`) on the same problems.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path


def one_token_ms(curve: Path, backend: str, threads: int) -> dict[str, float]:
    """Each model's one-token forward cost (ms) on `backend` with `threads` threads."""
    rows = json.loads(curve.read_text())["rows"]
    return {r["model"]: r["ms"][0] for r in rows
            if r["backend"] == backend and r["threads"] == threads}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, nargs="+", required=True)
    ap.add_argument("--curve", type=Path, required=True)
    ap.add_argument("--backend", default="llama.cpp")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    cost = one_token_ms(args.curve, args.backend, args.threads)
    measured: dict[str, float] = collections.defaultdict(float)
    projected: dict[str, float] = collections.defaultdict(float)
    tokens: dict[str, int] = collections.defaultdict(int)
    rows = [json.loads(line) for path in args.runs for line in path.open()]
    methods = {r["method"] for r in rows}
    problems = {p for p in {r["problem"] for r in rows}  # those every method ran on
                if {r["method"] for r in rows if r["problem"] == p} == methods}
    for r in rows:
        if r["problem"] not in problems:
            continue
        measured[r["method"]] += r["latency_s"]
        tokens[r["method"]] += r["new_tokens"]
        calls = {model: r["forwards"].get(model, r["forwards"].get(f"{model} decode", [0]))[0]
                 for model in ("draft", "target")}
        projected[r["method"]] += sum(calls[m] * cost[m] for m in calls) / 1e3
    base_m, base_p = measured["target"], projected["target"]
    print(f"{len(problems)} problems; one-token forwards: draft {cost['draft']} ms, target "
          f"{cost['target']} ms ({args.backend}, {args.threads} thread(s))\n")
    print("| method | tokens | measured s | vs llama.cpp alone | projected s (flat curve) | "
          "vs llama.cpp alone |\n|---|---|---|---|---|---|")
    for method in measured:
        print(f"| {method} | {tokens[method]} | {measured[method]:.1f} | "
              f"{measured[method] / base_m:.2f}x | {projected[method]:.1f} | "
              f"{projected[method] / base_p:.2f}x |")


if __name__ == "__main__":
    main()
