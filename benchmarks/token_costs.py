"""Seconds per output token, by where the token came from, in a per-problem benchmark run.

For the problems every listed method finished: the draft alone, token-level SD, the target alone,
and a SpecGuard method split into its two phases: tokens the draft wrote that were kept (kept or
target-checked steps, and the verified prefix of a refused step), charged the proposal and check
seconds; and tokens of the speculative fallback after a refusal, charged the fallback seconds. It
answers whether a method can beat token-SD: a kept draft token can never cost less than the draft
alone's seconds per token.

    xz -dk benchmarks/results/cascade-gsm8k-cpu1core-run3/results.jsonl.xz   # a stored run's rows
    python benchmarks/token_costs.py benchmarks/results/cascade-gsm8k-cpu1core-run3 \
        [--method specguard-balanced]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

BASELINES = ("draft", "token-sd", "target")


def costs(rows: list[dict[str, Any]], method: str) -> dict[str, Any]:
    """Tokens and seconds per source over the problems every method in `BASELINES + (method,)`
    that the run has finished (the latest row of each (problem, method) counts); a baseline the
    run did not include is left out (token-SD is required: the ratios are against it)."""
    latest: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in rows:
        latest[row["uid"]][row["method"]] = row
    present = {m for by in latest.values() for m in by}
    baselines = [b for b in BASELINES if b in present]
    if "token-sd" not in baselines or method not in present:
        raise ValueError(f"the run needs token-sd and {method} rows (it has {sorted(present)})")
    wanted = (*baselines, method)
    done = [uid for uid, by in latest.items() if all(m in by for m in wanted)]
    out: dict[str, Any] = {"problems": len(done)}
    for name in baselines:
        tokens = sum(latest[uid][name]["new_tokens"] for uid in done)
        seconds = sum(latest[uid][name]["latency_s"] for uid in done)
        out[name] = dict(tokens=tokens, seconds=seconds)
    fallback_tokens = fallback_s = draft_tokens = draft_s = wasted = 0.0
    for uid in done:
        run = latest[uid][method]
        refused = sum(s["tokens"] - s["verified_prefix"] for s in run.get("step_trace", [])
                      if s["path"].startswith("target-verified"))
        fallback_tokens += refused
        draft_tokens += run["new_tokens"] - refused
        phases = run.get("phase_s", {})
        fallback_s += phases.get("fallback", 0.0)
        draft_s += sum(phases.get(p, 0.0) for p in ("propose", "target_check", "select", "score"))
        wasted += run.get("draft_wasted") or 0
    out[f"{method}: draft-written, kept"] = dict(tokens=draft_tokens, seconds=draft_s)
    out[f"{method}: fallback"] = dict(tokens=fallback_tokens, seconds=fallback_s)
    out[method] = dict(tokens=sum(latest[u][method]["new_tokens"] for u in done),
                       seconds=sum(latest[u][method]["latency_s"] for u in done))
    out["draft_wasted_per_problem"] = wasted / max(1, len(done))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a bench --out folder (results.jsonl)")
    ap.add_argument("--method", default="specguard-balanced")
    args = ap.parse_args()
    rows = [json.loads(line) for line in (args.run / "results.jsonl").read_text().splitlines()
            if line.strip()]
    try:
        table = costs(rows, args.method)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    sd = table["token-sd"]["seconds"] / max(1, table["token-sd"]["tokens"])
    print(f"{args.run}: {table['problems']} problems every method finished")
    print("| tokens from | tokens | seconds | s/token | vs token-SD's s/token |")
    print("|---|---|---|---|---|")
    for name, cell in table.items():
        if not isinstance(cell, dict):
            continue
        per = cell["seconds"] / max(1, cell["tokens"])
        print(f"| {name} | {cell['tokens']:.0f} | {cell['seconds']:.1f} | {per:.3f} | "
              f"{per / sd:.2f}x |")
    print(f"draft tokens wasted per problem ({args.method}): "
          f"{table['draft_wasted_per_problem']:.0f}")


if __name__ == "__main__":
    main()
