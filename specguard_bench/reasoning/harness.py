"""The reasoning benchmark's run: all methods on the same problems, interleaved problem by
problem, resumable.

Output directory (`BenchSettings.out_dir`): `results.jsonl` and `run.json`, the resumable store
(`specguard_bench.common.store`), and the reports (`reasoning.report`: `summary.json`,
`results.md`, `results.png`), rewritten at the end of every run from all rows of the selected
problems and methods.

Within one problem the methods run in a rotated order (problem i starts with method i mod m), so
no method is always first after a model switch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specguard_bench.common.engines import Engines, base_config
from specguard_bench.common.environment import environment, previous_environment
from specguard_bench.common.lock import holding_out_dir
from specguard_bench.common.methods import MethodOutput, check_methods, run_method
from specguard_bench.common.rows import ProblemRow, specguard_fields
from specguard_bench.common.settings import BenchSettings
from specguard_bench.common.store import (
    RESULTS,
    append_row,
    check_resume,
    iterate_pairs,
    load_rows,
    pending_pairs,
    unique,
)
from specguard_bench.reasoning.answers import grade
from specguard_bench.reasoning.problems import Problem, load_file, load_problems, messages_for
from specguard_bench.reasoning.report import SUMMARY, build_summary, write_reports
from specguard_core.config import NormBounds

WARMUP_PROMPT = "What is 2 + 3?"


def run_pair(
    engine: Any, problem: Problem, method: str, settings: BenchSettings, bounds: NormBounds | None
) -> ProblemRow:
    """Run one method on one problem, grade it, and build its row."""
    return problem_row(problem, method, generate(engine, problem, method, settings, bounds))


def generate(
    engine: Any, problem: Problem, method: str, settings: BenchSettings, bounds: NormBounds | None
) -> MethodOutput:
    """Run one method on one problem, timed (no grading: math-verify's timeout needs the main
    thread, and this may run in a client thread)."""
    return run_method(
        engine,
        method,
        messages_for(problem.question),
        max_new_tokens=settings.max_new_tokens,
        seed=settings.seed * 1_000_003 + problem.index,
        sets=settings.sets,
        bounds=bounds,
    )


def problem_row(problem: Problem, method: str, out: MethodOutput) -> ProblemRow:
    """Grade one method's output on one problem (in the main thread) and build its row."""
    verdict = grade(out.text, problem.gold)
    row = ProblemRow(
        uid=problem.uid,
        dataset=problem.dataset,
        index=problem.index,
        method=method,
        correct=verdict.correct,
        predicted=verdict.predicted,
        gold=problem.gold,
        latency_s=out.latency_s,
        new_tokens=out.new_tokens,
        prompt_tokens=out.prompt_tokens,
        finish_reason=out.finish_reason,
        text=out.text,
        prefilled_draft=out.prefilled_draft,
        prefilled_target=out.prefilled_target,
    )
    if out.result is not None:
        for key, value in specguard_fields(out.result).items():
            setattr(row, key, value)
    return row


def warm_up(engine: Any, methods: Sequence[str], settings: BenchSettings) -> None:
    """One short untimed run of each method (lazy initialisation, kernel selection, caches)."""
    for method in methods:
        run_method(
            engine,
            method,
            messages_for(WARMUP_PROMPT),
            max_new_tokens=8,
            seed=settings.seed,
            sets=settings.sets,
        )


def selected_problems(settings: BenchSettings) -> list[Problem]:
    """The run's problems: `n` from `offset` of the dataset or of `dataset_file`."""
    if settings.dataset_file:
        return load_file(settings.dataset_file, settings.n, settings.offset)
    return load_problems(settings.dataset, settings.n, settings.offset)


@holding_out_dir
def run_bench(settings: BenchSettings, engine: Any = None, remote_engine: Any = None
              ) -> dict[str, Any]:
    """Run (or resume) the benchmark; return the summary dict (also written to disk).

    `engine`: an already-built SpecGuardEngine (tests, notebooks); loaded from
    `settings.draft/target` otherwise (and only when a method needs it); `remote_engine` the same
    for `specguard-remote` (loaded from `settings.served`). Raises ResumeMismatch if `out_dir`
    holds results made with other settings (or on other problems), OutDirBusy while another run
    holds it, ValueError for bad dataset/method names and BenchFileError for a damaged file.
    """
    methods = check_methods(settings.methods, remote=settings.served is not None)
    problems = selected_problems(settings)
    bounds = NormBounds.load(settings.bounds_path) if settings.bounds_path else None
    out_dir = settings.out_dir
    check_resume(out_dir, settings.fingerprint(bounds), tasks=problems)
    results = out_dir / RESULTS
    done = {(r.uid, r.method) for r in load_rows(results)}
    pairs = pending_pairs(problems, methods, done)
    engines = Engines(settings, settings.served, local=engine, remote=remote_engine)
    if pairs:
        if settings.warmup:
            for method in sorted({m for _, m in pairs}):
                warm_up(engines.for_method(method), [method], settings)
        for problem, method in iterate_pairs(pairs, settings.progress):
            append_row(results, run_pair(engines.for_method(method), problem, method, settings,
                                         bounds))
    wanted = {p.uid for p in problems}
    rows = unique((r for r in load_rows(results) if r.uid in wanted and r.method in methods),
                  key=lambda r: (r.uid, r.method))
    engine = engines.any()
    base = engine.config if engine is not None else base_config(settings.sets)
    env = (environment(engine) if engine is not None
           else previous_environment(out_dir / SUMMARY, settings.device))
    summary = build_summary(rows, settings, bounds, base, env)
    write_reports(out_dir, summary)
    return summary
