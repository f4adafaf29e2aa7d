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

import json
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from specguard_bench.data import Problem
from specguard_bench.engines import Engines
from specguard_bench.harness import (
    BenchSettings,
    environment,
    generate,
    machine_line,
    problem_row,
    selected_problems,
    warm_up,
)
from specguard_bench.methods import MethodOutput, check_methods, preset_of
from specguard_bench.metrics import ProblemRow, fmt_cell
from specguard_bench.store import append_json, check_resume, load_jsonl
from specguard_core.config import NormBounds

ROUNDS, RUN = "concurrency.jsonl", "concurrency-run.json"
SUMMARY, TABLE, PLOT = "concurrency.json", "concurrency.md", "concurrency.png"


@dataclass
class Request:
    """One request of a round: its row (`row.latency_s` is the request latency) and when it ran,
    in seconds since the round began, on which client thread."""

    row: ProblemRow
    client: int
    started_s: float
    finished_s: float

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "row": self.row.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Request:
        return cls(row=ProblemRow.from_dict(data["row"]), client=int(data["client"]),
                   started_s=float(data["started_s"]), finished_s=float(data["finished_s"]))


@dataclass
class Round:
    """All the run's problems served by `concurrency` clients of one engine with `method`.
    `wall_s`: first call to last answer. `requests` in problem order."""

    method: str
    concurrency: int
    uids: list[str]
    wall_s: float
    requests: list[Request]
    # a batching engine's forwards during the round: rows per forward -> forwards (None: no
    # batching, or a round stored before this was recorded)
    row_counts: dict[int, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "concurrency": self.concurrency, "uids": self.uids,
                "wall_s": self.wall_s, "requests": [r.to_dict() for r in self.requests],
                **({"row_counts": self.row_counts} if self.row_counts is not None else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Round:
        counts = data.get("row_counts")
        return cls(method=data["method"], concurrency=int(data["concurrency"]),
                   uids=list(data["uids"]), wall_s=float(data["wall_s"]),
                   requests=[Request.from_dict(r) for r in data["requests"]],
                   row_counts={int(k): int(v) for k, v in counts.items()} if counts else None)


def check_levels(levels: Sequence[int], n_problems: int) -> tuple[int, ...]:
    """The levels to run, ascending, with 1 (the baseline) added. Each must be >= 1 and at most
    the number of problems (more clients than requests would measure fewer than N at once)."""
    if any(level < 1 for level in levels):
        raise ValueError(f"--concurrency levels must be >= 1, got {list(levels)}")
    out = tuple(sorted({1, *levels}))
    if out[-1] > n_problems:
        raise ValueError(f"--concurrency {out[-1]} needs at least {out[-1]} problems; raise --n "
                         f"(now {n_problems}; a multiple of the largest level keeps every client "
                         "busy to the end)")
    return out


def concurrency_methods(methods: Sequence[str], *, remote: bool) -> tuple[str, ...]:
    """The SpecGuard methods of `methods` (validated); the baselines are not served by the
    engine, so naming one is a ValueError."""
    methods = check_methods(methods, remote=remote)
    if baselines := [m for m in methods if preset_of(m) is None]:
        raise ValueError(f"--concurrency measures the SpecGuard methods (engine.generate from "
                         f"several threads); drop {', '.join(baselines)} from --methods")
    return methods


# --------------------------------------------------------------------------- running


def run_round(engine: Any, method: str, problems: Sequence[Problem], concurrency: int,
              settings: BenchSettings, bounds: NormBounds | None) -> Round:
    """Serve `problems` with `concurrency` client threads sharing `engine` (see the module
    docstring); the answers are graded afterwards, in this thread. A failing request (or an
    interrupt) stops the other clients before their next request and is raised."""
    queue = list(reversed(problems))
    lock, failed = threading.Lock(), threading.Event()
    start = threading.Barrier(concurrency)  # the N clients arrive together, as N users would

    def client(cid: int, t0: float) -> list[tuple[Problem, MethodOutput, int, float, float]]:
        done = []
        try:
            start.wait(timeout=60)
        except threading.BrokenBarrierError:  # a client never started: the others go anyway
            pass
        while not failed.is_set():
            with lock:
                if not queue:
                    break
                problem = queue.pop()
            started = time.perf_counter() - t0
            try:
                out = generate(engine, problem, method, settings, bounds)
            except BaseException:
                failed.set()
                raise
            done.append((problem, out, cid, started, time.perf_counter() - t0))
        return done

    batcher = getattr(engine, "batcher", None)
    before = dict(batcher.stats.row_counts) if batcher is not None else {}
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench-client") as pool:
        t0 = time.perf_counter()
        futures = [pool.submit(client, cid, t0) for cid in range(concurrency)]
        try:
            served = [item for f in futures for item in f.result()]
        except BaseException:  # also Ctrl-C: the clients stop after the request they are in
            failed.set()
            raise
    order = {p.uid: i for i, p in enumerate(problems)}
    served.sort(key=lambda item: order[item[0].uid])
    requests = [Request(problem_row(problem, method, out), cid, started, finished)
                for problem, out, cid, started, finished in served]
    counts = None
    if batcher is not None:  # this round's forwards only (the stats count since the engine began)
        after = batcher.stats.row_counts
        counts = {rows: n - before.get(rows, 0) for rows, n in sorted(after.items())
                  if n > before.get(rows, 0)}
    return Round(method=method, concurrency=concurrency, uids=[p.uid for p in problems],
                 wall_s=max(r.finished_s for r in requests), requests=requests,
                 row_counts=counts)


def load_rounds(path: Path) -> list[Round]:
    """The rounds stored in `path` ([] if missing; a truncated last line is skipped)."""
    return load_jsonl(path, Round.from_dict)


def run_concurrency(settings: BenchSettings, levels: Sequence[int], engine: Any = None,
                    remote_engine: Any = None) -> dict[str, Any]:
    """Run (or resume) the concurrency measurement of `settings.methods` (SpecGuard methods
    only) at `levels` (1 added); return the summary (also written to disk). `engine` /
    `remote_engine`: already-built engines, as for `run_bench`. Raises ResumeMismatch when
    `out_dir` holds rounds made with other settings, ValueError for bad levels or methods."""
    methods = concurrency_methods(settings.methods, remote=settings.served is not None)
    problems = selected_problems(settings)
    levels = check_levels(levels, len(problems))
    bounds = NormBounds.load(settings.bounds_path) if settings.bounds_path else None
    out_dir = settings.out_dir
    check_resume(out_dir, settings.fingerprint(bounds), run=RUN, results=ROUNDS)
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
    env = environment(used) if used is not None else _previous_environment(out_dir)
    if used is not None:  # how the engine was built (a batching engine's bounds will show here)
        env["engine"] = {"class": type(used).__name__,
                         "engine_config": used.engine_config.model_dump(mode="json")}
    figures = summarize_rounds(rounds)
    summary = {
        "settings": {**settings.fingerprint(bounds),
                     "dataset": settings.dataset_file.stem if settings.dataset_file
                     else settings.dataset,
                     "n": len(problems), "offset": settings.offset, "methods": list(methods),
                     "levels": list(levels), "out_dir": str(out_dir)},
        "environment": env,
        "levels": [s.to_dict() for s in figures],
        "table": markdown_table(figures),
    }
    write_reports(out_dir, summary)
    return summary


def _previous_environment(out_dir: Path) -> dict[str, Any]:
    path = out_dir / SUMMARY
    if path.exists():
        return dict(json.loads(path.read_text()).get("environment", {}))
    return environment()


# --------------------------------------------------------------------------- reports


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) with linear interpolation between order statistics (numpy's
    default); one value is every percentile of itself."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class LevelSummary:
    """One round in figures. `*_vs_1` compare with the same method's level-1 round (None when
    there is none): throughput ratio (>1: more tokens/s) and latency ratios (>1: slower
    requests). `same_text_as_1`: requests whose text equals the level-1 request's."""

    method: str
    concurrency: int
    requests: int
    wall_s: float
    new_tokens: int
    tokens_per_s: float
    latency_p50_s: float
    latency_p95_s: float
    latency_mean_s: float
    n_correct: int
    throughput_vs_1: float | None = None
    p50_vs_1: float | None = None
    p95_vs_1: float | None = None
    same_text_as_1: int | None = None
    rows_per_forward: float | None = None  # batching: mean rows of the round's forwards

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize_round(found: Round) -> LevelSummary:
    """The figures of one round (no comparison yet)."""
    latencies = [r.row.latency_s for r in found.requests]
    tokens = sum(r.row.new_tokens for r in found.requests)
    return LevelSummary(
        method=found.method, concurrency=found.concurrency, requests=len(found.requests),
        wall_s=found.wall_s, new_tokens=tokens,
        tokens_per_s=tokens / found.wall_s if found.wall_s > 0 else 0.0,
        latency_p50_s=percentile(latencies, 50), latency_p95_s=percentile(latencies, 95),
        latency_mean_s=statistics.fmean(latencies),
        n_correct=sum(r.row.correct for r in found.requests),
        rows_per_forward=(sum(rows * n for rows, n in found.row_counts.items())
                          / sum(found.row_counts.values())) if found.row_counts else None)


def summarize_rounds(rounds: Sequence[Round]) -> list[LevelSummary]:
    """One `LevelSummary` per round, compared with its method's level-1 round where there is one."""
    base = {r.method: r for r in rounds if r.concurrency == 1}
    out = []
    for found in rounds:
        s = summarize_round(found)
        one = base.get(found.method)
        if one is not None and found is not one:
            b = summarize_round(one)
            s.throughput_vs_1 = _ratio(s.tokens_per_s, b.tokens_per_s)
            s.p50_vs_1 = _ratio(s.latency_p50_s, b.latency_p50_s)
            s.p95_vs_1 = _ratio(s.latency_p95_s, b.latency_p95_s)
            serial = {r.row.uid: r.row.text for r in one.requests}
            s.same_text_as_1 = sum(serial.get(r.row.uid) == r.row.text for r in found.requests)
        out.append(s)
    return out


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def markdown_table(summaries: Sequence[LevelSummary]) -> str:
    """The level summaries as a GitHub markdown table (one row per method and level)."""
    head = ("| method | clients | requests | wall s | tokens | tok/s | tok/s vs N=1 | p50 s | p95 s | "
            "p50 vs N=1 | p95 vs N=1 | correct | same text as N=1 | rows/forward |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in summaries:
        same = "–" if s.same_text_as_1 is None else f"{s.same_text_as_1}/{s.requests}"
        lines.append(
            f"| {s.method} | {s.concurrency} | {s.requests} | {s.wall_s:.2f} | {s.new_tokens} | "
            f"{s.tokens_per_s:.2f} | {fmt_cell(s.throughput_vs_1, '.2f', 'x')} | "
            f"{s.latency_p50_s:.2f} | {s.latency_p95_s:.2f} | {fmt_cell(s.p50_vs_1, '.2f', 'x')} | "
            f"{fmt_cell(s.p95_vs_1, '.2f', 'x')} | {s.n_correct}/{s.requests} | {same} | "
            f"{fmt_cell(s.rows_per_forward, '.2f', '')} |")
    return "\n".join(lines) + "\n"


def write_reports(out_dir: Path, summary: Mapping[str, Any]) -> None:
    """Write concurrency.json, concurrency.md (settings line + table) and concurrency.png."""
    from specguard_bench.plot import plot_concurrency

    (out_dir / SUMMARY).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    s, env = summary["settings"], summary["environment"]
    header = (
        f"# SpecGuard concurrency: {s['dataset']} problems {s['offset']}..{s['offset'] + s['n'] - 1}"
        f"\n\nclients {', '.join(map(str, s['levels']))} on one engine; draft `{s['draft']}`, "
        f"target `{s['target']}`"
        + (f" (specguard-remote: `{s['served_target']['model']}` at {s['served_target']['url']})"
           if "served_target" in s else "")
        + f", {machine_line(env)}, {s['dtype']}, max {s['max_new_tokens']} new tokens\n\n"
    )
    (out_dir / TABLE).write_text(header + summary["table"])
    plot_concurrency(summary, out_dir / PLOT)
