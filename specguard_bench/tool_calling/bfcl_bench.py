"""`specguard bench --suite bfcl`: BFCL single-turn tool calling, every method on the same tasks.

Each (task, method): the task's functions offered as tools through the engine's chat template
(`MethodEngine.generate(messages, tools=...)`, the same call and parser for every method), the
calls it wrote scored with BFCL's AST rules (`bfcl_check`). The output directory holds
`results.jsonl` and `run.json` (resumable, as the reasoning benchmark's), `summary.json` and
`results.md`: per category and method, accuracy, the invalid-call rate, latency, tokens and the
SpecGuard steps per path, and the lines that were skipped (with why); `results.png` plots accuracy
and latency over token-level SD per category.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from specguard_bench.common.environment import machine_line
from specguard_bench.common.lock import holding_out_dir
from specguard_bench.common.methods import preset_of
from specguard_bench.common.metrics import fmt_cell
from specguard_bench.common.plot import plot_groups
from specguard_bench.common.store import stored_path
from specguard_bench.common.table import md_table
from specguard_bench.tool_calling.bfcl_check import Check, check_task
from specguard_bench.tool_calling.bfcl_data import CATEGORIES, BfclTask, Skipped, load_categories, load_file
from specguard_bench.tool_calling.chat_engine import MethodEngine
from specguard_bench.tool_calling.rows import BfclRow
from specguard_bench.tool_calling.suites import (
    PLOT,
    SUMMARY,
    TABLE,
    SuiteSettings,
    add_vs_token_sd,
    as_target,
    as_target_cells,
    check_suite_methods,
    method_config,
    path_cell,
    path_counts,
    paths_per_task,
    run_suite,
    task_seed,
    timed,
)
from specguard_core.config import NormBounds
from specguard_core.text.chat import InputError
from specguard_core.types import GenerationResult

WARMUP_TOOL = {"type": "function", "function": {
    "name": "add", "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                   "b": {"type": "number"}},
                   "required": ["a", "b"]}}}


def load_tasks(settings: SuiteSettings) -> tuple[list[BfclTask], list[Skipped]]:
    """The run's tasks (`n` from `offset` of each category, or of `dataset_file`) and the
    lines skipped."""
    if settings.dataset_file is not None:
        return load_file(settings.dataset_file, settings.n, settings.offset)
    return load_categories(settings.categories or CATEGORIES, settings.n, settings.offset)


def task_row(task: BfclTask, method: str, result: GenerationResult | None, latency_s: float,
             verdict: Check) -> dict[str, Any]:
    """One (task, method) result as stored in results.jsonl (`result` None: the input was
    refused and `verdict.error` says why)."""
    row: dict[str, Any] = {
        "uid": task.uid, "category": task.category, "task_id": task.task_id,
        "index": task.index, "method": method, "correct": verdict.correct,
        "error": verdict.error, "latency_s": latency_s, "calls": [], "invalid_calls": [],
        "new_tokens": 0, "prompt_tokens": 0, "finish_reason": "error", "text": "",
        "paths": None, "draft_tokens": None, "target_tokens": None, "step_trace": None}
    if result is None:
        return row
    return {**row,
            "calls": [{"name": c.name, "arguments": c.arguments} for c in result.tool_calls],
            "invalid_calls": [{"name": c.name, "error": c.error, "raw": c.raw}
                              for c in result.invalid_tool_calls],
            "new_tokens": result.usage.completion_tokens,
            "prompt_tokens": result.usage.prompt_tokens,
            "finish_reason": result.finish_reason, "text": result.raw_text,
            "paths": path_counts(result.steps) if preset_of(method) is not None else None,
            "draft_tokens": result.stats.draft_tokens,
            "target_tokens": result.stats.target_tokens,
            "step_trace": [s.trace() for s in result.steps]}


def run_task(engine: Any, task: BfclTask, method: str, settings: SuiteSettings,
             bounds: NormBounds | None) -> dict[str, Any]:
    """Run one method on one task, timed, and score its calls."""
    import torch

    seed = task_seed(settings, task.index)
    torch.manual_seed(seed)
    chat = MethodEngine(engine, method)
    cfg = method_config(engine, method, settings, bounds, seed)
    try:
        result, latency = timed(lambda: chat.generate(task.messages, tools=task.tools,
                                                      config=cfg), engine)
    except InputError as err:  # e.g. a prompt longer than the context window
        return task_row(task, method, None, 0.0, Check(False, f"input refused: {err}"))
    verdict = check_task(task, [(c.name, c.arguments) for c in result.tool_calls],
                         [c.error or "invalid" for c in result.invalid_tool_calls])
    return task_row(task, method, result, latency, verdict)


def warm_up(engine: Any, method: str, settings: SuiteSettings) -> None:
    """One short untimed tool-calling run of `method`."""
    cfg = method_config(engine, method, settings, None, settings.seed).merged(max_new_tokens=8)
    MethodEngine(engine, method).generate([{"role": "user", "content": "What is 2 + 3?"}],
                                          tools=[WARMUP_TOOL], config=cfg)


def group_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregates of one (category, method) group: accuracy, calls and the invalid-call rate
    (invalid calls over calls written), latency, tokens, steps, steps per path per task."""
    calls = sum(len(r["calls"]) + len(r["invalid_calls"]) for r in rows)
    invalid = sum(len(r["invalid_calls"]) for r in rows)
    latency = [float(r["latency_s"]) for r in rows]
    return {
        "n": len(rows), "n_correct": sum(bool(r["correct"]) for r in rows),
        "accuracy": sum(bool(r["correct"]) for r in rows) / len(rows),
        "calls": calls, "invalid_calls": invalid,
        "invalid_call_rate": invalid / calls if calls else None,
        "tasks_with_invalid_call": sum(bool(r["invalid_calls"]) for r in rows),
        "errors": sum(r["finish_reason"] == "error" for r in rows),
        "latency_median_s": statistics.median(latency), "latency_mean_s": statistics.fmean(latency),
        "new_tokens_mean": statistics.fmean(r["new_tokens"] for r in rows),
        "prompt_tokens_mean": statistics.fmean(r["prompt_tokens"] for r in rows),
        "steps_mean": statistics.fmean(len(r["step_trace"] or []) for r in rows),
        "paths_per_task": paths_per_task(rows),
    }


def task_calls(r: Mapping[str, Any]) -> tuple[Any, Any]:
    """A BFCL row's calls: the valid ones and the invalid ones' text."""
    return r["calls"], [c["raw"] for c in r["invalid_calls"]]


def summarize(rows: Sequence[Mapping[str, Any]], methods: Sequence[str]
              ) -> dict[str, dict[str, dict[str, Any]]]:
    """{category: {method: group summary}}, categories in row order, then "all" (every task);
    each with its comparison to the target (`as_target`) and its mean latency over token-level
    SD's (`vs_token_sd`) when those methods ran."""
    categories = list(dict.fromkeys(r["category"] for r in rows))
    target = {r["uid"]: r for r in rows if r["method"] == "target"}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for category in [*categories, "all"]:
        groups = {m: [r for r in rows if r["method"] == m
                      and (category == "all" or r["category"] == category)] for m in methods}
        out[category] = {m: {**group_summary(g), "as_target": as_target(g, target, task_calls)}
                         for m, g in groups.items() if g}
        add_vs_token_sd(out[category])
    return out


_HEAD = ("category", "method", "accuracy", "invalid calls", "target's calls",
         "call/answer differs", "median s", "mean s", "vs token-SD", "new tokens", "steps",
         "kept/checked/verified/regen per task")


def markdown_table(summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """One row per (category, method)."""
    return md_table(_HEAD, (_row(category, method, s) for category, methods in summary.items()
                            for method, s in methods.items()))


def _row(category: str, method: str, s: Mapping[str, Any]) -> list[str]:
    same, differs = as_target_cells(s["as_target"])
    return [category, method, f"{s['accuracy']:.1%} ({s['n_correct']}/{s['n']})",
            f"{fmt_cell(s['invalid_call_rate'], '.1%')} ({s['invalid_calls']}/{s['calls']})",
            same, differs, f"{s['latency_median_s']:.2f}", f"{s['latency_mean_s']:.2f}",
            fmt_cell(s["vs_token_sd"], ".2f", "x"), f"{s['new_tokens_mean']:.0f}",
            fmt_cell(s["steps_mean"], ".1f"),
            path_cell(s["paths_per_task"])]


@holding_out_dir
def run_bfcl(settings: SuiteSettings, engine: Any = None) -> dict[str, Any]:
    """Run (or resume) the BFCL suite; return the summary (also written to disk). `engine`: an
    already-built SpecGuardEngine (else loaded from `settings.draft/target` when needed)."""
    methods = check_suite_methods(settings.methods)
    tasks, skipped = load_tasks(settings)
    rows, env, bounds = run_suite(settings, tasks, methods, engine, run_task, warm_up, BfclRow)
    by_category = summarize(rows, methods)
    summary = {
        "settings": {**settings.fingerprint(bounds), "n": settings.n, "offset": settings.offset,
                     "categories": list(dict.fromkeys(t.category for t in tasks)),
                     "dataset_file": stored_path(settings.dataset_file) if settings.dataset_file else None,
                     "methods": list(methods), "out_dir": stored_path(settings.out_dir)},
        "environment": env, "n_tasks": len(tasks),
        "skipped": [{"source": stored_path(s.source), "line": s.line, "id": s.task_id, "field": s.field,
                     "error": s.error} for s in skipped],
        "categories": by_category, "table": markdown_table(by_category)}
    write_reports(settings, summary, skipped)
    return summary


def write_reports(settings: SuiteSettings, summary: Mapping[str, Any],
                  skipped: Sequence[Skipped]) -> None:
    """summary.json, results.md (the table, then the skipped lines) and results.png (accuracy
    and latency over token-level SD per category and method)."""
    out = settings.out_dir
    (out / SUMMARY).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    s = summary["settings"]
    head = (f"# SpecGuard BFCL benchmark: {summary['n_tasks']} tasks "
            f"({', '.join(s['categories'])})\n\ndraft `{s['draft']}`, target `{s['target']}`, "
            f"{machine_line(summary['environment'])}, {s['dtype']}, max {s['max_new_tokens']} new tokens\n\n")
    tail = "".join(f"- {replace(entry, source=stored_path(entry.source))}\n" for entry in skipped)
    (out / TABLE).write_text(head + summary["table"]
                             + (f"\n## Skipped lines\n\n{tail}" if tail else ""))
    plot_groups(summary["categories"], f"BFCL, {summary['n_tasks']} tasks", s, out / PLOT)
