"""The agents suite's run and reports: `run_agents` (resumable, as every suite), and per
framework and method: accuracy, end states, model turns, tool calls, repeated and invalid calls,
wall time, tokens and SpecGuard steps per path (`summary.json`, `results.md`; `results.png`
plots accuracy and latency over token-level SD)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from specguard_bench.common.environment import machine_line
from specguard_bench.common.lock import holding_out_dir
from specguard_bench.common.metrics import fmt_cell
from specguard_bench.common.plot import plot_groups
from specguard_bench.common.store import stored_path
from specguard_bench.common.table import md_table
from specguard_bench.tool_calling.agents_bench import (
    END_STATES,
    import_frameworks,
    load_tasks,
    run_task,
    warm_up,
)
from specguard_bench.tool_calling.rows import AgentRow
from specguard_bench.tool_calling.suites import (
    PLOT,
    SUMMARY,
    TABLE,
    SuiteSettings,
    add_vs_token_sd,
    as_target,
    as_target_cells,
    check_suite_methods,
    path_cell,
    paths_per_task,
    run_suite,
)


def group_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregates of one (framework, method) group."""
    latency = [float(r["latency_s"]) for r in rows]
    return {
        "n": len(rows), "n_correct": sum(bool(r["correct"]) for r in rows),
        "accuracy": sum(bool(r["correct"]) for r in rows) / len(rows),
        "end_states": {s: sum(r["end_state"] == s for r in rows) for s in END_STATES},
        "model_turns_mean": statistics.fmean(r["model_turns"] for r in rows),
        "tool_calls_mean": statistics.fmean(r["tool_calls"] for r in rows),
        "repeated_calls": sum(r["repeated_calls"] for r in rows),
        "invalid_calls": sum(r["invalid_calls"] for r in rows),
        "latency_median_s": statistics.median(latency), "latency_mean_s": statistics.fmean(latency),
        "new_tokens_mean": statistics.fmean(r["new_tokens"] for r in rows),
        "paths_per_task": paths_per_task(rows),
    }


def task_calls(r: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    """An agent row's calls, each with its model turn: the valid ones and the invalid ones' text
    (both empty when the agent answered without a call)."""
    turns = list(enumerate(r["turns"]))
    return ([[i, c] for i, t in turns for c in t["calls"]],
            [[i, c["raw"]] for i, t in turns for c in t["invalid_calls"]])


def summarize(rows: Sequence[Mapping[str, Any]], methods: Sequence[str]
              ) -> dict[str, dict[str, dict[str, Any]]]:
    """{framework: {method: group summary}}, frameworks in row order; each with its comparison
    to the target (`as_target`: tasks whose every turn made the target's calls, tasks that
    called a tool where the target called none or the other way round) and its mean latency
    over token-level SD's (`vs_token_sd`) when those methods ran."""
    target = {r["uid"]: r for r in rows if r["method"] == "target"}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for framework in dict.fromkeys(r["framework"] for r in rows):
        groups = {m: [r for r in rows if r["method"] == m and r["framework"] == framework]
                  for m in methods}
        out[framework] = {m: {**group_summary(g), "as_target": as_target(g, target, task_calls)}
                          for m, g in groups.items() if g}
        add_vs_token_sd(out[framework])
    return out


_HEAD = ("framework", "method", "accuracy", "answered/turn limit/error", "turns", "tool calls",
         "repeated", "invalid", "target's calls", "call/answer differs", "median s", "mean s",
         "vs token-SD", "new tokens", "kept/checked/verified/regen per task")


def markdown_table(summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """One row per (framework, method)."""
    return md_table(_HEAD, (_row(framework, method, s) for framework, methods in summary.items()
                            for method, s in methods.items()))


def _row(framework: str, method: str, s: Mapping[str, Any]) -> list[str]:
    same, differs = as_target_cells(s["as_target"])
    return [framework, method, f"{s['accuracy']:.1%} ({s['n_correct']}/{s['n']})",
            "/".join(str(s["end_states"][e]) for e in END_STATES),
            f"{s['model_turns_mean']:.1f}", f"{s['tool_calls_mean']:.1f}",
            str(s["repeated_calls"]), str(s["invalid_calls"]), same, differs,
            f"{s['latency_median_s']:.2f}", f"{s['latency_mean_s']:.2f}",
            fmt_cell(s["vs_token_sd"], ".2f", "x"), f"{s['new_tokens_mean']:.0f}",
            path_cell(s["paths_per_task"])]


@holding_out_dir
def run_agents(settings: SuiteSettings, engine: Any = None) -> dict[str, Any]:
    """Run (or resume) the agents suite; return the summary (also written to disk)."""
    methods = check_suite_methods(settings.methods)
    if settings.turn_limit < 1:
        raise ValueError("--turn-limit must be at least 1")
    import_frameworks(settings.frameworks)
    tasks = load_tasks(settings)
    rows, env, bounds = run_suite(settings, tasks, methods, engine, run_task, warm_up, AgentRow)
    by_framework = summarize(rows, methods)
    summary: dict[str, Any] = {
        "settings": {**settings.fingerprint(bounds), "n": settings.n, "offset": settings.offset,
                     "frameworks": list(settings.frameworks), "agent_task": settings.agent_task,
                     "dataset_file": stored_path(settings.dataset_file) if settings.dataset_file else None,
                     "methods": list(methods), "out_dir": stored_path(settings.out_dir)},
        "environment": env, "n_problems": len({t.problem.uid for t in tasks}),
        "frameworks": by_framework, "table": markdown_table(by_framework)}
    out = settings.out_dir
    (out / SUMMARY).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    s = summary["settings"]
    what = ("GSM8K problems" if settings.agent_task == "problem"
            else "GSM8K worked answers as expressions")
    (out / TABLE).write_text(
        f"# SpecGuard agents benchmark: {summary['n_problems']} {what}, calculator "
        f"tools, turn limit {settings.turn_limit}\n\ndraft `{s['draft']}`, target "
        f"`{s['target']}`, {machine_line(env)}, {s['dtype']}, max "
        f"{s['max_new_tokens']} new tokens per turn\n\n" + summary["table"])
    title = "GSM8K agents" if settings.agent_task == "problem" else "GSM8K expression agents"
    plot_groups(by_framework, f"{title}, {summary['n_problems']} problems", s, out / PLOT)
    return summary
