"""Lossless `balanced` with and without the draft's prompt-lookup guesses, beside token-level SD:
latency, and each model's forwards and the seconds inside them, on GSM8K problems of the shipped
data (methods interleaved, one process, the same engine).

    taskset -c 0 .venv/bin/python benchmarks/draft_lookahead.py --problems 950,951 --max-new-tokens 300

Prints one line per problem and method, and the totals; nothing is written.
"""

from __future__ import annotations

import argparse
import collections
from typing import Any

import torch

from specguard import SpecGuardEngine
from specguard_bench.common.methods import count_calls, run_method
from specguard_bench.reasoning.problems import INSTRUCTION, load_problems
from specguard_core.models.options import LoadOptions

VARIANTS: list[tuple[str, dict[str, Any] | None]] = [
    ("token-sd", None),
    ("specguard-balanced", {"draft_lookahead": 0}),
    ("specguard-balanced", {"draft_lookahead": 8}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="950,951", help="GSM8K indices, comma-separated")
    ap.add_argument("--max-new-tokens", type=int, default=300)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    torch.set_num_threads(1)
    engine = SpecGuardEngine.from_pretrained(
        "qwen0.5b", "qwen1.5b", load=LoadOptions(device="cpu", dtype=args.dtype))
    seen: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    count_calls(engine.draft.model, "forward", "draft", seen)
    count_calls(engine.target.model, "forward", "target", seen)
    total: dict[str, float] = collections.defaultdict(float)
    problems = load_problems("gsm8k")  # the file read once
    for index in (int(i) for i in args.problems.split(",")):
        question = problems[index].question
        # the instruction after a space, not the bench's newline (`messages_for`): how the note's
        # figures were measured
        messages = [{"role": "user", "content": f"{question} {INSTRUCTION}"}]
        texts = {}
        for method, sets in VARIANTS:
            seen.clear()
            out = run_method(engine, method, messages, max_new_tokens=args.max_new_tokens,
                             sets=sets)
            name = method + (f"/lookahead={sets['draft_lookahead']}" if sets else "")
            texts[name] = out.text
            total[name] += out.latency_s
            forwards = {k: f"{int(v[0])} forwards, {v[1]:.1f} s" for k, v in seen.items()}
            print(f"{index} {name}: {out.latency_s:.1f} s, {out.new_tokens} tokens, {forwards}",
                  flush=True)
        same = texts["specguard-balanced/lookahead=0"] == texts["specguard-balanced/lookahead=8"]
        print(f"{index} the same text with and without lookahead: {same}", flush=True)
    for name, seconds in total.items():
        print(f"{name}: {seconds:.1f} s, {seconds / total['token-sd']:.3f}x token-level SD")


if __name__ == "__main__":
    main()
