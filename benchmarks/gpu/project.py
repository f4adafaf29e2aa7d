"""Projected latency per method on another machine: a recorded benchmark run's step traces (its
acceptance) replayed with that machine's measured forward costs (`costs.py`'s costs.json).

    python -m benchmarks.gpu.project --costs gpu-out/costs.json --out gpu-out
    python -m benchmarks.gpu.project --costs benchmarks/gpu/cpu1core-recorded-costs.json \
        --check-against benchmarks/results/cascade-gsm8k-cpu1core-run3

`--check-against` is the calibration: costs measured on the machine that made the run must replay
its measured latencies within --tolerance (default 10%) for every method with a trace (and the
target / draft baselines); token-SD is an estimate (see `replay.py`) and is reported, not checked.
Reads only JSON (no torch, no specguard imports), so it runs anywhere.
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks.gpu` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu.replay import (  # noqa: E402
    MethodSettings,
    ModelCosts,
    SDRates,
    replay_baseline,
    replay_specguard,
    replay_token_sd,
    sd_rates,
)

ROOT = Path(__file__).resolve().parents[2]
RUNS = ["cascade-gsm8k-cpu1core-run3", "cascade-math500-cpu1core-run3",
        "cascade-gsm8k-cpu1core-run3-paper"]
DEFAULT_RUNS = [ROOT / "benchmarks" / "results" / r for r in RUNS]


def shown(path: Path) -> str:
    """A path as the reports name it: relative to the repository when inside it, else its name
    (never a machine's absolute path)."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.name


def run_lines(run: Path) -> list[str]:
    """The lines of a bench --out folder's `results.jsonl`, or of `results.jsonl.xz` (how the
    repository stores a run's rows: benchmarks/results/README.md)."""
    path = run / "results.jsonl"
    if path.exists():
        return path.read_text().splitlines()
    if path.with_name(path.name + ".xz").exists():
        with lzma.open(path.with_name(path.name + ".xz"), "rt") as f:
            return f.read().splitlines()
    raise ValueError(f"{run} has no results.jsonl: give a `specguard bench --out` folder")


def load_run(run: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the latest row of each (problem, method), run.json) of a bench --out folder."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for line in run_lines(run):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a last line cut short by a killed run
            latest[(row["uid"], row["method"])] = row
    meta = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
    return list(latest.values()), meta


def settings_of(method: str, meta: dict[str, Any]) -> MethodSettings:
    """The fallback a SpecGuard method ran with, from run.json's presets and variants."""
    name = method.removeprefix("specguard-")
    preset, fixed = (meta.get("variants") or {}).get(name, (name, {}))
    cfg = {**(meta.get("presets") or {}).get(preset, {}), **fixed}
    return MethodSettings(str(cfg.get("fallback", "speculative")), int(cfg.get("fallback_k", 1)))


def replay_row(row: dict[str, Any], draft: ModelCosts, target: ModelCosts, meta: dict[str, Any],
               rates: SDRates | None) -> tuple[dict[str, float] | None, bool]:
    """(seconds by component, or None when the row cannot be replayed; whether it is an
    estimate)."""
    method = row["method"]
    if method in ("target", "draft"):
        return replay_baseline(row, target if method == "target" else draft), False
    if method == "token-sd":
        return (replay_token_sd(row, draft, target, rates) if rates else None), True
    if row.get("step_trace"):
        return replay_specguard(row, draft, target, settings_of(method, meta)), False
    return None, False


def project_run(run: Path, draft: ModelCosts, target: ModelCosts) -> dict[str, Any]:
    """Per method: measured and replayed seconds over its rows, and over the problems every
    method finished (for the speed-ups)."""
    rows, meta = load_run(run)
    rates = sd_rates(rows)
    by_uid: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        by_uid[r["uid"]].add(r["method"])
    methods = sorted({r["method"] for r in rows})
    common = {u for u, ms in by_uid.items() if len(ms) == len(methods)}
    out: dict[str, Any] = dict(run=shown(run), problems_common=len(common), methods={},
                               token_sd_rates=vars(rates) if rates else None)
    for method in methods:
        own = [r for r in rows if r["method"] == method]
        parts = [(r, *replay_row(r, draft, target, meta, rates)) for r in own]
        done = [(r, p) for r, p, _ in parts if p is not None]
        if not done:
            out["methods"][method] = dict(n=len(own), replayed=0)
            continue
        breakdown: dict[str, float] = defaultdict(float)
        for _, p in done:
            for k, v in p.items():
                breakdown[k] += v
        shared = [(r, p) for r, p in done if r["uid"] in common]
        out["methods"][method] = dict(
            n=len(own), replayed=len(done), estimated=parts[0][2],
            measured_s=sum(r["latency_s"] for r, _ in done),
            projected_s=sum(sum(p.values()) for _, p in done),
            tokens=sum(r["new_tokens"] for r, _ in done),
            common_projected_s=sum(sum(p.values()) for _, p in shared),
            common_measured_s=sum(r["latency_s"] for r, _ in shared),
            breakdown=dict(breakdown))
    for base in ("target", "token-sd"):
        ref = out["methods"].get(base, {}).get("common_projected_s")
        for m in out["methods"].values():
            if ref and m.get("common_projected_s"):
                m[f"speedup_vs_{base}"] = ref / m["common_projected_s"]
    return out


def check(result: dict[str, Any], tolerance: float) -> list[str]:
    """The methods whose replay misses their measured latency by more than `tolerance`."""
    bad = []
    for method, m in result["methods"].items():
        if m.get("replayed") and not m.get("estimated"):
            err = m["projected_s"] / m["measured_s"] - 1
            if abs(err) > tolerance:
                bad.append(f"{method}: replayed {m['projected_s']:.1f} s vs measured "
                           f"{m['measured_s']:.1f} s ({err:+.1%})")
    return bad


def markdown(results: list[dict[str, Any]], title: str, errors: bool) -> str:
    """One row per (run, pair, mode, method); `errors` adds the replay's error against the
    recorded latency (meaningful only for costs of the machine that made the run)."""
    head = ("| run | pair | mode | method | problems | recorded s | projected s | projected tok/s | "
            "vs target | vs token-SD |" + (" error vs recorded |" if errors else ""))
    lines = [f"# {title}", "", head, "|---" * head.count("|", 1) + "|"]
    for res in results:
        for method, m in res["methods"].items():
            if not m.get("replayed"):
                continue
            est = " (estimate)" if m["estimated"] else ""
            err = f" {m['projected_s'] / m['measured_s'] - 1:+.1%} |" if errors else ""
            lines.append(
                f"| {Path(res['run']).name} | {res['pair']} | {res['mode']} | {method}{est} | "
                f"{m['replayed']} | {m['measured_s']:.1f} | {m['projected_s']:.1f} | "
                f"{m['tokens'] / max(1e-9, m['projected_s']):.1f} | "
                f"{m.get('speedup_vs_target', float('nan')):.2f}x | "
                f"{m.get('speedup_vs_token-sd', float('nan')):.2f}x |{err}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--costs", type=Path, required=True, help="costs.json from costs.py")
    ap.add_argument("--runs", type=Path, nargs="+", default=DEFAULT_RUNS,
                    help="bench --out folders whose traces to replay (default: the CPU runs)")
    ap.add_argument("--pairs", nargs="+", help="pairs of costs.json to project (default: all)")
    ap.add_argument("--modes", nargs="+", choices=["eager", "static"], help="default: all measured")
    ap.add_argument("--check-against", type=Path, metavar="RUN",
                    help="calibration: replay RUN with --costs and fail beyond --tolerance")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--out", type=Path, default=None, help="write projection.json/.md here")
    args = ap.parse_args(argv)
    try:
        report = json.loads(args.costs.read_text())
    except (OSError, json.JSONDecodeError) as err:
        ap.error(f"cannot read --costs {args.costs}: {err}")
    pairs = args.pairs or list(report.get("pairs", {}))
    unknown = [p for p in pairs if p not in report.get("pairs", {})]
    if unknown:
        ap.error(f"pair(s) {unknown} are not in {args.costs} (it has {list(report['pairs'])})")
    runs = [args.check_against] if args.check_against else args.runs
    results, problems = [], []
    for pair in pairs:
        names = report["pairs"][pair]
        entries = [report["models"].get(names["draft"], {}), report["models"].get(names["target"], {})]
        measured = ["eager"] + (["static"] if all(e.get("static", {}).get("decode") for e in entries)
                                else [])
        for mode in args.modes or measured:
            try:
                draft, target = (ModelCosts(e, mode) for e in entries)
            except ValueError as err:
                problems.append(f"{pair} {mode}: {err}")
                continue
            for run in runs:
                try:
                    res = project_run(run, draft, target)
                except ValueError as err:
                    ap.error(str(err))
                results.append(dict(res, pair=pair, mode=mode))
    title = f"Projection with {shown(args.costs)} ({report['machine']['device_name']})"
    text = markdown(results, title, errors=bool(args.check_against))
    text += "".join(f"\nnot projected: {p}\n" for p in problems)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "projection.json").write_text(json.dumps(dict(
            costs=shown(args.costs), machine=report["machine"], results=results,
            not_projected=problems), indent=2) + "\n")
        (args.out / "projection.md").write_text(text)
    if args.check_against:
        bad = [f"{r['pair']} {r['mode']}: {b}" for r in results for b in check(r, args.tolerance)]
        for b in bad:
            print(f"calibration FAILED (> {args.tolerance:.0%}): {b}", file=sys.stderr)
        if not results or bad:
            return 1
        print(f"calibration ok: every checked method within {args.tolerance:.0%}")
    return 0 if results else 1


if __name__ == "__main__":
    raise SystemExit(main())
