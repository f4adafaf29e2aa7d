"""The handlers of `specguard bench ...` and `specguard calibrate ...` (the parsers: `parsers.py`).

`cmd_bench(args)` and `cmd_calibrate(args)` turn the parsed flags into the bench's settings, run
them and return the exit status: 0, or 2 with a one-line `error: ...` on bad options. The loading
flags (`LOAD_FLAGS`: `LoadOptions`' fields) are parsed here (`load_options`). Heavy imports (torch,
transformers, the harness) happen inside the handlers, so building the parsers stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from specguard_bench.common.methods import METHODS, REMOTE_METHOD, preset_of
from specguard_bench.reasoning.problems import DEFAULT_MAX_NEW_TOKENS, FILE_MAX_NEW_TOKENS
from specguard_core.config import parse_sets
from specguard_core.flags import error_line, flag_name
from specguard_core.models.options import LoadFlags, LoadOptions

# the loading flags (LoadOptions' fields); the bench's default dtype is bfloat16
LOAD_FLAGS = LoadFlags(default_help={"dtype": "bfloat16; synthetic mode: float32 for tiny/small, "
                                              "bfloat16 for real"})


def _max_new_tokens(args: argparse.Namespace) -> int:
    """--max-new-tokens, else the suite's or the dataset's default cap."""
    from specguard_bench.tool_calling.names import DEFAULT_MAX_NEW_TOKENS as SUITE_MAX_NEW_TOKENS

    if args.max_new_tokens is not None:
        return int(args.max_new_tokens)
    if getattr(args, "suite", "reasoning") in SUITE_MAX_NEW_TOKENS:
        return SUITE_MAX_NEW_TOKENS[args.suite]
    if getattr(args, "dataset_file", None) is not None:
        return FILE_MAX_NEW_TOKENS
    return DEFAULT_MAX_NEW_TOKENS.get(args.dataset, FILE_MAX_NEW_TOKENS)


def load_options(args: argparse.Namespace) -> LoadOptions:
    """The loading flags as `LoadOptions` (dtype: bfloat16 unless given); a bad value, or a
    served-target flag without --target-url, is a ValueError naming the flag."""
    load = LOAD_FLAGS.parse(args)
    if "dtype" in LOAD_FLAGS.given(args) or load.backend == "llama.cpp":  # llama.cpp: the GGUF's
        return load
    return load.merged(dtype="bfloat16")


def _methods(args: argparse.Namespace, remote: bool) -> tuple[str, ...]:
    """--methods, else all methods (the SpecGuard ones with --concurrency); --target-url adds
    specguard-remote."""
    if args.methods is not None:
        methods = tuple(args.methods)
    elif args.concurrency is not None:
        methods = tuple(m for m in METHODS if preset_of(m) is not None)
    else:
        methods = METHODS
    return (*methods, REMOTE_METHOD) if remote and REMOTE_METHOD not in methods else methods


def _bench(args: argparse.Namespace, sets: dict[str, Any]) -> None:
    from specguard_bench.common.engines import ServedTarget
    from specguard_bench.common.settings import BenchSettings
    from specguard_bench.reasoning.harness import run_bench

    load = load_options(args)
    served = ServedTarget.of(load)
    settings = BenchSettings(
        out_dir=args.out,
        dataset=args.dataset,
        n=args.n,
        offset=args.offset,
        seed=args.seed,
        methods=_methods(args, served is not None),
        sets=sets,
        max_new_tokens=_max_new_tokens(args),
        dataset_file=args.dataset_file,
        **_pair(args, load),
        batching=args.batching,
        max_batch_rows=_max_batch_rows(args),
        bounds_path=args.bounds,
        warmup=not args.no_warmup,
        progress=not args.no_progress,
        served=served,
    )
    if args.concurrency is not None:
        from specguard_bench.concurrency.run import run_concurrency

        report = run_concurrency(settings, args.concurrency)
        print(report["table"], end="")
        print(f"results in {args.out}/ (concurrency.jsonl, concurrency.json, concurrency.md, "
              "concurrency.png)")
        return
    summary = run_bench(settings)
    print(summary["table"], end="")
    print(f"results in {args.out}/ (results.jsonl, summary.json, results.md, results.png)")


def _suite(args: argparse.Namespace, sets: dict[str, Any]) -> None:
    """--suite bfcl / agents: the tool-calling suites (`suite_command.run_command`)."""
    from specguard_bench.cli.suite_command import run_command

    if args.concurrency is not None or args.target_url:
        raise ValueError(f"--concurrency and --target-url apply to the reasoning suite, not "
                         f"--suite {args.suite}")
    run_command(args, sets, load=load_options(args), max_new_tokens=_max_new_tokens(args),
                max_batch_rows=_max_batch_rows(args))


def _synthetic(args: argparse.Namespace, sets: dict[str, Any]) -> None:
    from specguard_bench.synthetic.report import synthetic_markdown
    from specguard_bench.synthetic.run import SyntheticSettings, run_synthetic

    report = run_synthetic(
        SyntheticSettings(
            out_dir=args.out,
            size=args.synthetic_size,
            device=load_options(args).device,
            dtype=None if args.dtype in (None, "auto") else args.dtype,
            preset=args.synthetic_preset,
            sets=sets,
            rates=tuple(args.acceptance),
            ks=tuple(args.ks),
            n_prompts=args.synthetic_prompts,
            seed=args.seed,
            progress=not args.no_progress,
        )
    )
    print(synthetic_markdown(report), end="")
    print(f"report in {args.out}/ (synthetic.json, synthetic.md, synthetic.png)")


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(max(1, threads))


def _max_batch_rows(args: argparse.Namespace) -> int | None:
    if args.max_batch_rows is None:
        return None
    if not args.batching:
        raise ValueError("--max-batch-rows bounds the batched forwards of --batching; add "
                         "--batching or drop --max-batch-rows")
    return int(args.max_batch_rows)


def cmd_bench(args: argparse.Namespace) -> int:
    """Handler of `bench`: 0 on success, 2 on bad options, a damaged file, or an output
    directory that is busy or holds other results (one `error:` line each)."""
    from specguard_bench.common.lock import OutDirBusy
    from specguard_bench.common.store import ResumeMismatch

    _set_threads(args.threads)
    try:
        sets = parse_sets(args.sets)
        if args.synthetic and (args.concurrency is not None or args.target_url or args.batching
                               or args.max_batch_rows is not None):
            raise ValueError("--concurrency, --batching, --max-batch-rows and --target-url "
                             "measure the real benchmark; they do not apply to --synthetic")
        loading = sorted(set(LOAD_FLAGS.given(args)) - {"device", "dtype", "target_url"})
        if args.synthetic and loading:
            raise ValueError(f"{', '.join(flag_name(n) for n in loading)} load real models; "
                             "--synthetic builds random-weight ones (drop them)")
        if args.synthetic and args.suite != "reasoning":
            raise ValueError("--synthetic times random-weight models; it has no --suite")
        run = _synthetic if args.synthetic else _bench if args.suite == "reasoning" else _suite
        run(args, sets)
    except (ValueError, ResumeMismatch, OutDirBusy, OSError) as err:
        print(f"error: {error_line(err)}", file=sys.stderr)
        return 2
    return 0


def _pair(args: argparse.Namespace, load: LoadOptions) -> dict[str, Any]:
    """The `PairSettings` fields that bench and calibrate take alike from the command line."""
    return {"draft": args.draft, "target": args.target, "device": load.device,
            "dtype": load.dtype, "load": load.in_process(), "heterogeneous": args.heterogeneous}


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Handler of `calibrate`: writes the bounds JSON and prints it."""
    from specguard_bench.verifier.calibrate import CalibrateSettings, run_calibrate

    _set_threads(args.threads)
    try:
        load = load_options(args)
        bounds = run_calibrate(
            CalibrateSettings(
                out=args.out,
                dataset=args.dataset,
                n=args.n,
                offset=args.offset,
                seed=args.seed,
                preset=args.preset,
                sets=parse_sets(args.sets),
                max_new_tokens=_max_new_tokens(args),
                **_pair(args, load),
                low_q=args.low_q,
                high_q=args.high_q,
                progress=not args.no_progress,
            )
        )
    except (ValueError, OSError) as err:
        print(f"error: {error_line(err)}", file=sys.stderr)
        return 2
    print(json.dumps(bounds.model_dump(), indent=2))
    print(f"bounds written to {args.out}")
    return 0
