"""What the tool-calling suites (`--suite bfcl`, `--suite agents`) share with the reasoning
benchmark: the settings, the resumable runner (one JSON row per (task, method) in
`results.jsonl`, methods rotated task by task, warm-up, progress bar), each method's config,
and timing.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specguard_bench.common.engines import Engines
from specguard_bench.common.environment import environment, previous_environment
from specguard_bench.common.files import load_jsonl
from specguard_bench.common.methods import METHODS, preset_of, specguard_config
from specguard_bench.common.settings import BenchSettings
from specguard_bench.common.store import (
    RESULTS,
    TaskT,
    append_json,
    check_resume,
    iterate_pairs,
    pending_pairs,
    unique,
)
from specguard_bench.tool_calling.names import FRAMEWORKS
from specguard_bench.tool_calling.rows import row_parser
from specguard_core.config import NormBounds, SpecGuardConfig
from specguard_core.types import StepPath, StepRecord

# every suite's reports, beside its results.jsonl
SUMMARY, TABLE, PLOT = "summary.json", "results.md", "results.png"
# a SpecGuard step's paths, in the reports' order
PATHS: tuple[StepPath, ...] = ("kept", "target-checked", "target-verified", "regenerated")


@dataclass(frozen=True)
class SuiteSettings(BenchSettings):
    """A tool-calling suite's run: `BenchSettings` (the pair, methods, `n`/`offset`, output
    directory, `--set` overrides, seed, warm-up) and the suite's own fields."""

    suite: str = "bfcl"  # "bfcl" or "agents"
    categories: tuple[str, ...] = ()  # bfcl: the shipped categories to run (empty: all)
    turn_limit: int = 8  # agents: the most model turns one task may take
    frameworks: tuple[str, ...] = FRAMEWORKS  # agents: which frameworks run the agent
    # agents: "problem" asks the GSM8K question; "expression" asks to compute the problem's
    # worked answer chained into one expression (`tool_calling.expressions`), which the pair
    # works out with the calculator where it answers a word problem in prose
    agent_task: str = "problem"

    def fingerprint(self, bounds: NormBounds | None) -> dict[str, Any]:
        """`BenchSettings.fingerprint` plus the suite (and, for agents, the turn limit)."""
        extra: dict[str, Any] = {"suite": self.suite}
        if self.suite == "agents":
            extra["turn_limit"] = self.turn_limit
            if self.agent_task != "problem":
                extra["agent_task"] = self.agent_task
        return {**super().fingerprint(bounds), **extra}


def check_suite_methods(methods: Sequence[str]) -> tuple[str, ...]:
    """The methods a tool-calling suite can run (all of `METHODS`; not the served target)."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown} for this suite; choose from "
                         f"{', '.join(METHODS)}")
    return tuple(dict.fromkeys(methods))


def method_config(engine: Any, method: str, settings: SuiteSettings, bounds: NormBounds | None,
                  seed: int) -> SpecGuardConfig:
    """The config one call of `method` runs with: the preset and `--set` overrides for the
    SpecGuard methods (as in the reasoning benchmark), the engine's config for the baselines;
    the suite's new-token cap and the task's seed."""
    if preset_of(method) is None:
        return engine.config.merged(max_new_tokens=settings.max_new_tokens, seed=seed)
    return specguard_config(engine.config, method, settings.sets,
                            max_new_tokens=settings.max_new_tokens, bounds=bounds
                            ).merged(seed=seed)


def task_seed(settings: BenchSettings, index: int) -> int:
    """The per-task seed (as the reasoning benchmark's per-problem seed)."""
    return settings.seed * 1_000_003 + index


def sync(engine: Any) -> None:
    """Wait for the pair's CUDA work (nothing on a CPU or a served target)."""
    import torch

    model = getattr(engine.target, "model", None) or engine.draft.model
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run: Callable[[], Any], engine: Any) -> tuple[Any, float]:
    """`run()` and its wall-clock seconds, CUDA synchronised before the clock stops."""
    t0 = time.perf_counter()
    out = run()
    sync(engine)
    return out, time.perf_counter() - t0


def run_pending(settings: SuiteSettings, bounds: NormBounds | None, tasks: Sequence[TaskT],
                methods: Sequence[str], engines: Engines,
                run_one: Callable[[Any, TaskT, str], Mapping[str, Any]],
                warm: Callable[[Any, str], None],
                parse: Callable[[Any], dict[str, Any]]) -> list[dict[str, Any]]:
    """Run (or resume) every (task, method) pair not yet in `results.jsonl`, task by task with
    the methods rotated, each row appended as it finishes; the rows of `tasks` x `methods`
    (each pair once), every stored row read through `parse` (`rows.row_parser`). Raises
    ResumeMismatch when the directory holds results made with other settings or tasks."""
    out_dir = settings.out_dir
    check_resume(out_dir, settings.fingerprint(bounds), tasks=tasks)
    results = out_dir / RESULTS
    done = {(r["uid"], r["method"]) for r in load_jsonl(results, parse)}
    pairs = pending_pairs(tasks, methods, done)
    if pairs and settings.warmup:
        for method in sorted({m for _, m in pairs}):
            warm(engines.for_method(method), method)
    for task, method in iterate_pairs(pairs, settings.progress, desc=settings.suite):
        append_json(results, run_one(engines.for_method(method), task, method))
    wanted = {t.uid for t in tasks}
    return unique((r for r in load_jsonl(results, parse)
                   if r["uid"] in wanted and r["method"] in methods),
                  key=lambda r: (r["uid"], r["method"]))


def run_suite(settings: SuiteSettings, tasks: Sequence[TaskT], methods: Sequence[str],
              engine: Any, run_task: Callable[..., Mapping[str, Any]],
              warm_up: Callable[..., None], row_type: type[Any]
              ) -> tuple[list[dict[str, Any]], dict[str, Any], NormBounds | None]:
    """What every suite does before its report: load the bounds, run the pending pairs with
    `run_task(engine, task, method, settings, bounds)` (after `warm_up(engine, method, settings)`),
    and read the environment (the last run's when nothing ran). Stored rows must have the shape
    `row_type` (`rows.BfclRow`, `rows.AgentRow`). Returns (rows, env, bounds). Call it with the
    output directory's lock held (`lock.holding_out_dir`), reports written."""
    bounds = NormBounds.load(settings.bounds_path) if settings.bounds_path else None
    engines = Engines(settings, local=engine)
    rows = run_pending(settings, bounds, tasks, methods, engines,
                       lambda eng, task, method: run_task(eng, task, method, settings, bounds),
                       lambda eng, method: warm_up(eng, method, settings),
                       row_parser(row_type))
    used = engines.any()
    env = (environment(used) if used is not None
           else previous_environment(settings.out_dir / SUMMARY, settings.device))
    return rows, env, bounds


def as_target(group: Sequence[Mapping[str, Any]], target: Mapping[str, Mapping[str, Any]],
              calls: Callable[[Mapping[str, Any]], Sequence[Any]]) -> dict[str, Any]:
    """How a method's tasks compare with the target's rows of the same tasks (`target`: by uid;
    `calls(row)`: what a task called, as a sequence whose parts are empty when it called
    nothing): tasks compared, tasks with exactly the target's calls, and tasks where it wrote a
    call and the target wrote none, or the other way round."""
    pairs = [(r, target[r["uid"]]) for r in group if r["uid"] in target]
    return {"compared": len(pairs),
            "same_calls": sum(calls(r) == calls(t) for r, t in pairs),
            "choice_differs": sum(any(calls(r)) != any(calls(t)) for r, t in pairs)}


def add_vs_token_sd(groups: Mapping[str, dict[str, Any]]) -> None:
    """Give each method's summary in `groups` its mean latency over token-level SD's
    (`vs_token_sd`; None when token-SD did not run)."""
    sd = groups.get("token-sd")
    for s in groups.values():
        s["vs_token_sd"] = s["latency_mean_s"] / sd["latency_mean_s"] if sd else None


def as_target_cells(vs: Mapping[str, Any]) -> tuple[str, str]:
    """The reports' "target's calls" and "call/answer differs" cells of an `as_target` result;
    "–" for both when no task was compared."""
    if not vs["compared"]:
        return "–", "–"
    return f"{vs['same_calls']}/{vs['compared']}", str(vs["choice_differs"])


def path_counts(steps: Iterable[StepRecord]) -> dict[str, int]:
    """How many of `steps` took each path."""
    counted = Counter(s.path for s in steps)
    return {p: counted[p] for p in PATHS}


def paths_per_task(rows: Sequence[Mapping[str, Any]]) -> dict[str, float] | None:
    """The mean steps per path over the rows that carry path counts (SpecGuard methods); None
    when none does (the baselines)."""
    traced = [r for r in rows if r["paths"] is not None]
    return ({p: statistics.fmean(r["paths"][p] for r in traced) for p in PATHS}
            if traced else None)


def path_cell(paths: Mapping[str, float] | None) -> str:
    """The report's kept/checked/verified/regen cell; "–" for a method without paths."""
    return "/".join(f"{paths[p]:.1f}" for p in PATHS) if paths else "–"
