"""Command-line pieces: `specguard bench ...` and `specguard calibrate ...`.

`add_bench_parser(subparsers)` and `add_calibrate_parser(subparsers)` register the subcommands on
an argparse sub-parser set, every flag documented where it is declared; each sets `func` to its
handler (`handlers.py`: `args.func(args)` returns the exit status). `main(argv)` is a
standalone entry point (`python -m specguard_bench bench ...`). Heavy imports (torch,
transformers) happen inside the handlers, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specguard_bench.cli.handlers import LOAD_FLAGS, cmd_bench, cmd_calibrate
from specguard_bench.common.methods import METHODS, REMOTE_METHOD
from specguard_bench.reasoning.problems import DATASETS
from specguard_bench.tool_calling.names import AGENT_METHODS, AGENT_TASKS, BFCL_METHODS, SUITES
from specguard_core.config import PRESETS, EngineConfig, positive_int
from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET


def _csv(kind: type) -> Any:
    def parse(text: str) -> tuple[Any, ...]:
        return tuple(kind(x) for x in text.split(",") if x.strip())

    return parse


def _model_args(parser: argparse.ArgumentParser, served: str | None = None) -> None:
    """The pair, its loading flags (with a served target's under the title `served`), and the
    flags shared by `bench` and `calibrate`."""
    parser.add_argument(
        "--draft",
        default=DEFAULT_DRAFT,
        help="draft model: hub id, folder, .gguf or cached name (default %(default)s)",
    )
    parser.add_argument(
        "--target", default=DEFAULT_TARGET, help="target model (default %(default)s)"
    )
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="SpecGuardConfig override for the SpecGuard methods, repeatable "
        "(k=4, tau=0.6; fast.k=4 for one preset)",
    )
    parser.add_argument(
        "--heterogeneous",
        action="store_true",
        help="draft and target have different tokenizers (steps cross between them as text)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="default: 700 for gsm8k, 800 for math500 and --dataset-file; "
                        "512 per model call for --suite bfcl and agents")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op CPU threads (default: torch's choice; 1 can be faster on a busy box)",
    )
    LOAD_FLAGS.add_groups(parser, served)


def add_bench_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Register `bench`: real-model comparison on GSM8K/MATH-500, or `--synthetic` timing."""
    p = subparsers.add_parser(
        "bench",
        help="compare target, draft, token-level SD and SpecGuard presets",
        description="Runs every method on the same problems, problem by problem; writes "
        "results.jsonl (resumable), summary.json, results.md and results.png to --out.",
    )
    p.add_argument("--suite", choices=SUITES, default="reasoning",
                   help="reasoning: GSM8K/MATH-500 answers (default); bfcl: BFCL single-turn "
                   "tool calling; agents: GSM8K with calculator tools through LangChain's "
                   "create_agent and LlamaIndex's FunctionAgent (docs/benchmarks.md)")
    p.add_argument("--dataset", choices=sorted(DATASETS), default="gsm8k")
    p.add_argument("--dataset-file", type=Path, default=None, metavar="PATH",
                   help="a JSONL of your own problems (GSM8K question/answer or MATH "
                   "problem/answer fields; with --suite bfcl, BFCL's id/question/function/"
                   "ground_truth) instead of --dataset")
    p.add_argument("--categories", type=_csv(str), default=None, metavar="C,C,...",
                   help="--suite bfcl: the shipped categories to run (default all: "
                   "simple_python,multiple,parallel,parallel_multiple,irrelevance); --n and "
                   "--offset apply to each")
    p.add_argument("--turn-limit", type=positive_int, default=8, metavar="N",
                   help="--suite agents: the most model turns one task may take (default 8)")
    p.add_argument("--frameworks", type=_csv(str), default=None, metavar="F,F",
                   help="--suite agents: langchain, llama_index (default both)")
    p.add_argument("--agent-task", choices=AGENT_TASKS, default="problem",
                   help="--suite agents: problem asks the GSM8K question (default); "
                   "expression asks to compute its worked answer chained into one expression "
                   "(the first --n problems from --offset that chain into 2 to 5 operations)")
    p.add_argument("--n", type=int, default=20, help="number of problems")
    p.add_argument("--offset", type=int, default=0, help="index of the first problem")
    p.add_argument(
        "--methods",
        type=_csv(str),
        default=None,
        help=f"comma-separated subset of {','.join(METHODS)} (default: all; with --concurrency "
        f"the specguard-* ones; {REMOTE_METHOD} with --target-url; --suite bfcl: "
        f"{','.join(BFCL_METHODS)}; --suite agents: {','.join(AGENT_METHODS)})",
    )
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="output directory")
    p.add_argument(
        "--bounds",
        type=Path,
        default=None,
        help="NormBounds JSON from `specguard calibrate` (recorded in the summary)",
    )
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up runs")
    p.add_argument(
        "--concurrency",
        type=_csv(int),
        default=None,
        metavar="N,N,...",
        help="instead of the per-problem comparison: serve the problems with N concurrent clients "
        "of one engine for each N (1 is always run, as the baseline) and report aggregate tok/s "
        "and p50/p95 request latency (concurrency.md/.json/.png in --out)",
    )
    p.add_argument("--batching", action="store_true",
                   help="build the engine with EngineConfig(batching=True): concurrent requests "
                   "share forwards (compare with a run without it, in another --out)")
    p.add_argument("--max-batch-rows", type=positive_int, default=None, metavar="N",
                   help="with --batching: the most rows in one batched forward (EngineConfig."
                   f"max_batch_rows, default {EngineConfig().max_batch_rows}; a k-candidate "
                   "proposal brings k rows, so the paper preset's k=16 needs more to batch)")
    _model_args(p, f"served target (--target-url adds the method {REMOTE_METHOD}: the "
                "balanced preset with the target on a vLLM server, beside the in-process pair)")
    syn = p.add_argument_group("synthetic mode (random weights, real architectures)")
    syn.add_argument(
        "--synthetic",
        action="store_true",
        help="time random-weight models instead of running the benchmark",
    )
    syn.add_argument(
        "--synthetic-size",
        choices=["tiny", "small", "real"],
        default="small",
        help="small: CPU-sized Qwen2 pair (float32); real: Qwen2.5-0.5B/7B shapes, bf16, for a GPU",
    )
    syn.add_argument("--synthetic-preset", choices=sorted(PRESETS), default="fast")
    syn.add_argument(
        "--acceptance",
        type=_csv(float),
        default=(0.5, 0.7, 0.9),
        help="forced acceptance rates (default 0.5,0.7,0.9)",
    )
    syn.add_argument("--ks", type=_csv(int), default=(1, 4, 16), help="k values (default 1,4,16)")
    syn.add_argument("--synthetic-prompts", type=int, default=3, help="measured runs per setting")
    p.set_defaults(func=cmd_bench)
    return p


def add_calibrate_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Register `calibrate`: fit NormBounds on problems outside the evaluated slice."""
    p = subparsers.add_parser(
        "calibrate",
        help="fit the normaliser bounds (NormBounds JSON) on unlabeled problems",
        description="Runs the draft (every step accepted) on --n problems from --offset and "
        "writes the 1st/99th percentiles of the step signals to --out: the draft's own, or the "
        "target's with --set experimental.scoring_model=target. Keep the slice disjoint from the one you "
        "evaluate.",
    )
    p.add_argument("--dataset", choices=sorted(DATASETS), default="gsm8k")
    p.add_argument("--n", type=int, default=20)
    p.add_argument("--offset", type=int, default=500)
    p.add_argument("--out", type=Path, default=Path("bounds.json"))
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="fast",
        help="SpecGuard preset whose sampling settings are used (default fast)",
    )
    p.add_argument("--low-q", type=float, default=1.0, help="lower percentile (default 1)")
    p.add_argument("--high-q", type=float, default=99.0, help="upper percentile (default 99)")
    _model_args(p)
    p.set_defaults(func=cmd_calibrate)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point with the `bench` and `calibrate` subcommands."""
    parser = argparse.ArgumentParser(prog="specguard-bench")
    sub = parser.add_subparsers(dest="command", required=True)
    add_bench_parser(sub)
    add_calibrate_parser(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))
