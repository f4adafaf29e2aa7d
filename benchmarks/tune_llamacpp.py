"""`balanced`'s settings on the llama.cpp backend, beside llama.cpp alone and token-level SD: each
variant's latency and tokens, and each model's forwards and the seconds inside them, on GSM8K
problems of the shipped data (methods interleaved per problem, one process, one engine).

    taskset -c 0 .venv/bin/python benchmarks/tune_llamacpp.py --problems 0,1,2 \\
        --out benchmarks/results/tune-llamacpp/gsm8k-0-2.jsonl

Prints one line per problem and method and the totals; with `--out`, appends one JSON row per
problem and method (rerun with the same file to skip what is there).
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path
from typing import Any

import torch

from specguard import SpecGuardEngine
from specguard_bench.common.methods import count_calls, run_method
from specguard_bench.reasoning.problems import load_problems, messages_for

VARIANTS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "target": ("target", None),
    "token-sd": ("token-sd", None),
    "balanced": ("specguard-balanced", {}),
    "balanced/lookahead=0": ("specguard-balanced", {"draft_lookahead": 0}),
    "balanced/lookahead=3": ("specguard-balanced", {"draft_lookahead": 3}),
    "balanced/check=8": ("specguard-balanced", {"check_tokens": 8}),
    "balanced/check=32": ("specguard-balanced", {"check_tokens": 32}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="0,1", help="GSM8K indices, comma-separated")
    ap.add_argument("--methods", default=",".join(VARIANTS), help=f"of {', '.join(VARIANTS)}")
    ap.add_argument("--max-new-tokens", type=int, default=800)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, help="a JSON-lines file to append rows to")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    engine = SpecGuardEngine.from_pretrained("qwen0.5b", "qwen1.5b", backend="llama.cpp",
                                             context_size=4096, progress=False)
    seen: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for name, handle in (("draft", engine.draft), ("target", engine.target)):
        count_calls(handle, "forward", name, seen)
        count_calls(handle.ctx, "decode", f"{name} decode", seen)  # the baselines' decodes
    done = set()
    if args.out and args.out.exists():
        done = {(r["problem"], r["method"]) for r in map(json.loads, args.out.open())}
    total: dict[str, float] = collections.defaultdict(float)
    problems = load_problems("gsm8k")
    for index in (int(i) for i in args.problems.split(",")):
        messages = messages_for(problems[index].question)
        for name in args.methods.split(","):
            if (index, name) in done:
                continue
            method, sets = VARIANTS[name]
            seen.clear()
            out = run_method(engine, method, messages, max_new_tokens=args.max_new_tokens,
                             sets=sets)
            total[name] += out.latency_s
            row = {"problem": index, "method": name, "latency_s": round(out.latency_s, 3),
                   "new_tokens": out.new_tokens, "text": out.text,
                   "forwards": {k: [int(v[0]), round(v[1], 3)] for k, v in seen.items()},
                   "paths": [s.path for s in out.result.steps] if out.result else None}
            print(f"{index} {name}: {out.latency_s:.1f} s, {out.new_tokens} tokens, "
                  f"{row['forwards']}", flush=True)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                with args.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    for name, seconds in total.items():
        print(f"{name}: {seconds:.1f} s")


if __name__ == "__main__":
    main()
