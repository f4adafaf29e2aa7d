"""`specguard bench --suite bfcl|agents`: from the parsed flags to a finished suite run
(the runner the suites share, which they import themselves, is `tool_calling.suites`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from specguard_bench.common.store import stored_path
from specguard_bench.tool_calling.names import AGENT_METHODS, BFCL_METHODS, FRAMEWORKS
from specguard_bench.tool_calling.suites import SuiteSettings
from specguard_core.models.options import LoadOptions


def run_command(args: argparse.Namespace, sets: Mapping[str, Any], *, load: LoadOptions,
                max_new_tokens: int, max_batch_rows: int | None) -> None:
    """`specguard bench --suite bfcl|agents ...`: build the settings from the parsed flags (and
    the loading flags' `load`), run the suite, print its table (and, for BFCL, the skipped
    lines on stderr)."""
    if args.suite == "bfcl" and args.dataset_file is not None and args.categories:
        raise ValueError("--categories selects shipped BFCL categories; a --dataset-file "
                         "brings its own (drop one of them)")
    default = BFCL_METHODS if args.suite == "bfcl" else AGENT_METHODS
    settings = SuiteSettings(
        out_dir=args.out, dataset="bfcl" if args.suite == "bfcl" else "gsm8k", n=args.n,
        offset=args.offset, seed=args.seed, methods=tuple(args.methods or default), sets=sets,
        max_new_tokens=max_new_tokens, dataset_file=args.dataset_file, draft=args.draft,
        target=args.target, device=load.device, dtype=load.dtype, load=load.in_process(),
        heterogeneous=args.heterogeneous, batching=args.batching, max_batch_rows=max_batch_rows,
        bounds_path=args.bounds, warmup=not args.no_warmup, progress=not args.no_progress,
        suite=args.suite, categories=tuple(args.categories or ()),
        turn_limit=args.turn_limit, frameworks=tuple(args.frameworks or FRAMEWORKS),
        agent_task=args.agent_task)
    if args.suite == "bfcl":
        from specguard_bench.tool_calling.bfcl_bench import run_bfcl

        summary = run_bfcl(settings)
        if summary["skipped"]:
            print(f"skipped {len(summary['skipped'])} task(s) that cannot be used:",
                  file=sys.stderr)
            # the summary stores a file's path relative; the console names it as it was given
            given = {stored_path(f): str(f) for f in [args.dataset_file] if f is not None}
            for entry in summary["skipped"]:
                who = f" ({entry['id']})" if entry["id"] else ""
                print(f"  {given.get(entry['source'], entry['source'])}:{entry['line']}{who}: "
                      f"{entry['field']}: {entry['error']}", file=sys.stderr)
    else:
        from specguard_bench.tool_calling.agents_report import run_agents

        summary = run_agents(settings)
    print(summary["table"], end="")
    print(f"results in {args.out}/ (results.jsonl, summary.json, results.md)")
