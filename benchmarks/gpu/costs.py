"""Forward costs of the draft/target pairs on this machine, from random-weight models built from the
real configs in `configs/` (shapes decide speed, weights do not), in bf16.

Per model (eager, the engine's DynamicCache path): one decode step of 1 / 4 / 16 cache rows, a
target pass over T = 8 / 16 / 32 / 64 tokens, at 256 / 1024 / 4096 tokens of context; a prompt
prefill; the draft's proposal loop per token. Then, while the time budget lasts, a StaticCache with
`torch.compile(mode="reduce-overhead")` (on a GPU; guarded, a failure is recorded). Timed with CUDA
events on a GPU, `time.perf_counter` on a CPU (see `timing.py`). Writes `costs.json` (read by
`project.py`) and `costs.md` under --out, after every model, so a run cut short keeps what it has.

    python -m benchmarks.gpu.costs --device cuda --out gpu-out
    python -m benchmarks.gpu.costs --tiny --device cpu --out tiny-costs   # seconds, on a CPU
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks.gpu` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks.gpu.measure import Deadline, EagerBench, Grid, compiled_costs  # noqa: E402
from benchmarks.gpu.models import PAIRS, build, load_spec, n_params, pair_models  # noqa: E402
from benchmarks.gpu.timing import Timer  # noqa: E402

SCHEMA = "specguard-gpu-costs/1"
TINY_GRID: dict[str, Any] = dict(contexts=[16, 32], rows=[1, 4], pass_tokens=[4, 8], prefill=[8, 16],
                 propose_rows=[1, 4], propose_tokens=4, compiled_pass_tokens=[4])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="cuda (default when a GPU is visible) or cpu")
    ap.add_argument("--tiny", action="store_true",
                    help="two-layer, 64-wide models and contexts 16/32: a CPU check in seconds")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-out"))
    ap.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="stop starting new measurements after this many seconds")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--contexts", type=int, nargs="+", help="override the grid's contexts")
    ap.add_argument("--threads", type=int, help="torch threads on a CPU (1 to match the CPU runs)")
    ap.add_argument("--compile", dest="compile", action=argparse.BooleanOptionalAction,
                    default=None, help="measure the StaticCache pass, compiled on a GPU and eager "
                    "on a CPU (default: on a GPU only)")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no GPU; use --device cpu (add --tiny for a quick run)")
    if args.budget_s <= 0 or args.repeats < 1 or args.warmup < 0:
        ap.error("--budget-s must be > 0, --repeats >= 1 and --warmup >= 0")
    if args.contexts and min(args.contexts) < 1:
        ap.error("--contexts must be positive token counts")
    return args


def grid_of(args: argparse.Namespace) -> Grid:
    grid = Grid(**TINY_GRID) if args.tiny else Grid(contexts=[256, 1024, 4096])
    if args.contexts:
        grid.contexts = sorted(args.contexts)
    return grid


def machine(args: argparse.Namespace, timer: Timer) -> dict[str, Any]:
    import transformers

    cuda = args.device.startswith("cuda")
    return dict(device=args.device, device_name=torch.cuda.get_device_name(args.device) if cuda
                else platform.processor() or platform.machine(), dtype="bfloat16", tiny=args.tiny,
                timer=timer.kind, warmup=args.warmup, repeats=args.repeats,
                torch=torch.__version__, transformers=transformers.__version__,
                python=platform.python_version(), torch_threads=torch.get_num_threads())


def measure_model(name: str, args: argparse.Namespace, grid: Grid, timer: Timer,
                  deadline: Deadline) -> dict[str, Any]:
    """The eager costs of model `name` (built, measured and freed)."""
    spec = load_spec(name, tiny=args.tiny)
    contexts, too_long = grid.fitting(spec.max_positions)
    t0 = time.perf_counter()
    model = build(spec, args.device, torch.bfloat16)
    timer.sync()
    entry: dict[str, Any] = dict(config=spec.config_file, params=n_params(model),
                                 layers=spec.values["num_hidden_layers"],
                                 hidden=spec.values["hidden_size"],
                                 vocab=spec.values["vocab_size"],
                                 build_s=time.perf_counter() - t0, contexts=contexts,
                                 skipped=[f"context {c}: over max_position_embeddings "
                                          f"{spec.max_positions}" for c in too_long])
    eager, skipped = EagerBench(model, timer, grid, deadline).run(contexts)
    entry["eager"] = eager
    entry["skipped"] += [f"eager {s}: time budget" for s in skipped]
    del model
    _free(args.device)
    return entry


def measure_static(name: str, entry: dict[str, Any], args: argparse.Namespace, grid: Grid,
                   timer: Timer, deadline: Deadline) -> None:
    """Add the StaticCache costs of model `name` to its `entry` (compiled on a GPU)."""
    model = build(load_spec(name, tiny=args.tiny), args.device, torch.bfloat16)
    entry["static"] = compiled_costs(model, timer, grid, entry["contexts"], deadline,
                                     compile_model=args.device.startswith("cuda"))
    del model
    _free(args.device)


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch._dynamo.reset()


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value * 1000:.2f}"


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"# Forward costs, {m['device_name']} ({m['device']}, {m['dtype']}"
             f"{', tiny configs' if m['tiny'] else ''})", "",
             f"torch {m['torch']}, transformers {m['transformers']}; timer: {m['timer']}, median of "
             f"{m['repeats']} after {m['warmup']} warm-up calls. Milliseconds.", ""]
    for name, e in report["models"].items():
        if "params" not in e:
            lines += [f"## {name}", "", "skipped: " + "; ".join(e.get("skipped", []))
                      + (f" ({e['error']})" if e.get("error") else ""), ""]
            continue
        lines += [f"## {name} ({e['params'] / 1e6:.1f}M parameters, {e['config']})", ""]
        modes = [("eager", e.get("eager", {}))] + \
            ([("static" + (" + torch.compile" if e["static"].get("compiled") else ""), e["static"])]
             if e.get("static") else [])
        for mode, res in modes:
            for kind, label in (("decode", "decode, rows"), ("pass", "pass, tokens"),
                                ("propose_per_token", "proposal loop per token, rows")):
                table = res.get(kind) or {}
                cols = sorted({int(n) for row in table.values() for n in row})
                if not cols:
                    continue
                lines += [f"{mode} {label}: | context | " + " | ".join(map(str, cols)) + " |",
                          "|---" * (len(cols) + 1) + "|"]
                for ctx, row in sorted(table.items(), key=lambda kv: int(kv[0])):
                    lines.append(f"| {ctx} | " + " | ".join(_ms(row.get(str(c))) for c in cols)
                                 + " |")
                lines.append("")
            if res.get("prefill"):
                lines += ["prefill: " + ", ".join(f"{p} tokens {_ms(s)}" for p, s in
                                                  res["prefill"].items()), ""]
            if res.get("errors"):
                lines += [f"{mode} errors: " + "; ".join(f"{k}: {v}" for k, v in
                                                       res["errors"].items()), ""]
        if e.get("skipped"):
            lines += ["skipped: " + "; ".join(e["skipped"]), ""]
    return "\n".join(lines) + "\n"


def write(out: Path, report: dict[str, Any]) -> None:
    (out / "costs.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "costs.md").write_text(markdown(report))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads or args.tiny:  # tiny ops on many threads only contend
        torch.set_num_threads(args.threads or 1)
    grid, timer = grid_of(args), Timer(args.device, args.warmup, args.repeats)
    deadline = Deadline(args.budget_s)
    static = args.compile if args.compile is not None else args.device.startswith("cuda")
    if args.device.startswith("cuda"):
        torch._dynamo.config.cache_size_limit = 64  # one graph per model and shape
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = dict(schema=SCHEMA, machine=machine(args, timer), grid=vars(grid),
                                  pairs={p: dict(draft=PAIRS[p][0], target=PAIRS[p][1])
                                         for p in args.pairs}, models={})
    names = pair_models(args.pairs)
    for name in names:  # eager for every model first: the projection needs them all
        if deadline.over:
            report["models"][name] = dict(skipped=["every measurement: time budget"])
            continue
        print(f"[costs] {name}: eager ({deadline.left():.0f} s of budget left)", flush=True)
        try:
            report["models"][name] = measure_model(name, args, grid, timer, deadline)
        except Exception as err:  # noqa: BLE001 - one model's failure (memory?) spares the others
            report["models"][name] = dict(error=f"{type(err).__name__}: {err}"[:500],
                                          skipped=["eager: failed, see error"])
            _free(args.device)
        write(args.out, report)
    for name in names if static else ():  # then the static cache (compiled), while time is left
        entry = report["models"][name]
        if deadline.over or "eager" not in entry:
            entry["skipped"].append("static cache: time budget")
            continue
        print(f"[costs] {name}: static cache ({deadline.left():.0f} s left)", flush=True)
        try:
            measure_static(name, entry, args, grid, timer, deadline)
        except Exception as err:  # noqa: BLE001 - recorded; the eager costs stand
            entry["static"] = dict(errors=dict(build=f"{type(err).__name__}: {err}"[:500]))
            _free(args.device)
        write(args.out, report)
    write(args.out, report)
    print(f"[costs] wrote {args.out / 'costs.json'} and {args.out / 'costs.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
