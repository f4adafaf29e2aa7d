"""`specguard bench --concurrency 1,4,8`: N clients at once on one engine.

For each level N and each SpecGuard method, one *round*: the run's problems are served by N client
threads that share ONE engine and call `engine.generate` as any caller would; each client takes the
next problem as soon as its previous answer is back (a closed loop, so N requests are in flight
until the last N). Whatever the engine does with concurrent calls (today it takes them one step at
a time; a batching engine batches them) is what gets measured, by the same command.

Per request: the latency of its `engine.generate` call (from the call to the answer, waiting for
the engine included) and everything `ProblemRow` holds. Per round: the wall time from the first
call to the last answer, so aggregate tokens/s = all new tokens / wall time. Level 1 (one client,
requests one after another) is always run: it is the baseline of the ratios.

Output directory (the bench's `--out`; beside a per-problem run's files, with its own fingerprint):
`concurrency.jsonl` (one `Round` per line, appended as each round ends: a stopped run resumes at
the next round; a round is redone if the problem selection changed) and `concurrency-run.json`;
`concurrency.json`, `concurrency.md`, `concurrency.png` are rewritten at the end of every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from specguard_bench.common.engines import Engines
from specguard_bench.common.environment import environment, previous_environment
from specguard_bench.common.lock import holding_out_dir
from specguard_bench.common.settings import BenchSettings
from specguard_bench.common.store import append_json, check_resume, stored_path
from specguard_bench.concurrency.report import SUMMARY, markdown_table, summarize_rounds, write_reports
from specguard_bench.concurrency.rounds import (
    check_levels,
    concurrency_methods,
    load_rounds,
    run_round,
)
from specguard_bench.reasoning.harness import selected_problems, warm_up
from specguard_core.config import NormBounds

ROUNDS, RUN = "concurrency.jsonl", "concurrency-run.json"


@holding_out_dir
def run_concurrency(settings: BenchSettings, levels: Sequence[int], engine: Any = None,
                    remote_engine: Any = None) -> dict[str, Any]:
    """Run (or resume) the concurrency measurement of `settings.methods` (SpecGuard methods
    only) at `levels` (1 added); return the summary (also written to disk). `engine` /
    `remote_engine`: already-built engines, as for `run_bench`. Raises ResumeMismatch when
    `out_dir` holds rounds made with other settings or problems, OutDirBusy while another run
    holds it, ValueError for bad levels or methods."""
    methods = concurrency_methods(settings.methods, remote=settings.served is not None)
    problems = selected_problems(settings)
    levels = check_levels(levels, len(problems))
    bounds = NormBounds.load(settings.bounds_path) if settings.bounds_path else None
    out_dir = settings.out_dir
    check_resume(out_dir, settings.fingerprint(bounds), run=RUN, results=ROUNDS, tasks=problems)
    uids = [p.uid for p in problems]
    done = {(r.method, r.concurrency) for r in load_rounds(out_dir / ROUNDS) if r.uids == uids}
    todo = [(level, m) for level in levels for m in methods if (m, level) not in done]
    engines = Engines(settings, settings.served, local=engine, remote=remote_engine)
    warmed: set[str] = set()
    with tqdm(total=len(todo), desc="concurrency", unit="round",
              disable=not settings.progress) as bar:
        for level, method in todo:
            bar.set_postfix_str(f"{method} x{level}")
            if settings.warmup and method not in warmed:
                warm_up(engines.for_method(method), [method], settings)
                warmed.add(method)
            found = run_round(engines.for_method(method), method, problems, level, settings,
                              bounds)
            append_json(out_dir / ROUNDS, found.to_dict())
            bar.update(1)
    latest = {(r.method, r.concurrency): r for r in load_rounds(out_dir / ROUNDS) if r.uids == uids}
    rounds = [latest[m, level] for m in methods for level in levels if (m, level) in latest]
    used = engines.any()
    env = environment(used) if used is not None else previous_environment(out_dir / SUMMARY)
    if used is not None:  # how the engine was built (a batching engine's bounds will show here)
        env["engine"] = {"class": type(used).__name__,
                         "engine_config": used.engine_config.model_dump(mode="json")}
    figures = summarize_rounds(rounds)
    summary = {
        "settings": {**settings.fingerprint(bounds),
                     "dataset": settings.dataset_file.stem if settings.dataset_file
                     else settings.dataset,
                     "n": len(problems), "offset": settings.offset, "methods": list(methods),
                     "levels": list(levels), "out_dir": stored_path(out_dir)},
        "environment": env,
        "levels": [s.to_dict() for s in figures],
        "table": markdown_table(figures),
    }
    write_reports(out_dir, summary)
    return summary
