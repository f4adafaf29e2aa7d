"""The forward-cost curve of each backend: what a model's forward over n new tokens costs against
one, as the engine runs it.

Speculation pays when checking n tokens in one forward costs about one token's forward. For each
backend (transformers in bf16, llama.cpp on the GGUF files), each model of the default pair and
each thread count: a forward of n = 1, 2, 4, 8, 16 new tokens after a 300-token context, with the
logits of every position (as the target's check reads them), through the engine's own model
handles (`try_tokens`, then `discard`), the best of `--reps`.

    taskset -c 0,1 .venv/bin/python benchmarks/forward_curve.py --threads 1 2 \\
        --out benchmarks/results/forward-curve-xeon2

writes `curve.json` and `curve.md` there (and prints the table).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET

ROWS = (1, 2, 4, 8, 16)
CONTEXT = 300


def curve(handle: Any, reps: int) -> list[float]:
    """Milliseconds of a forward of n new tokens after a CONTEXT-token prefix, for n in ROWS."""
    gen = torch.Generator().manual_seed(0)
    state = handle.new_state()
    handle.extend(state, torch.randint(100, 10000, (CONTEXT,), generator=gen).tolist())
    out = []
    for n in ROWS:
        ids = torch.randint(100, 10000, (n,), generator=gen).tolist()
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            handle.try_tokens(state, ids).discard()
            best = min(best, time.perf_counter() - t0)
        out.append(best * 1e3)
    return out


def handles(backend: str, threads: int) -> dict[str, Any]:
    """The default pair's draft and target handles on `backend` with `threads` threads."""
    torch.set_num_threads(threads)
    from specguard_core import SpecGuardEngine

    extra = {"context_size": 2048} if backend == "llama.cpp" else {"dtype": "bfloat16",
                                                                   "device": "cpu"}
    engine = SpecGuardEngine.from_pretrained(DEFAULT_DRAFT, DEFAULT_TARGET, backend=backend,
                                             progress=False, **extra)
    return {"draft": engine.draft, "target": engine.target}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", nargs="+", default=["transformers", "llama.cpp"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    rows = []
    for backend in args.backends:
        for threads in args.threads:
            for role, handle in handles(backend, threads).items():
                ms = curve(handle, args.reps)
                rows.append({"backend": backend, "threads": threads, "model": role,
                             "ms": [round(x, 1) for x in ms]})
                print(rows[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"machine": platform.processor() or platform.machine(), "rows_n": list(ROWS),
            "context": CONTEXT, "reps": args.reps, "torch": torch.__version__}
    (args.out / "curve.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    head = "| backend | threads | model | " + " | ".join(f"n={n}" for n in ROWS) + \
        " | n=16 / n=1 |\n|---|---|---|" + "---|" * (len(ROWS) + 1) + "\n"
    body = "".join(f"| {r['backend']} | {r['threads']} | {r['model']} | "
                   + " | ".join(f"{x:.0f}" for x in r["ms"])
                   + f" | {r['ms'][-1] / r['ms'][0]:.1f}x |\n" for r in rows)
    (args.out / "curve.md").write_text(head + body)
    print(head + body)


if __name__ == "__main__":
    main()
