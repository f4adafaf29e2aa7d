"""The rounds of `specguard bench --concurrency`: N client threads sharing one engine.

One *round*: the run's problems served by N client threads that share ONE engine and call
`engine.generate` as any caller would; each client takes the next problem as soon as its previous
answer is back (a closed loop, so N requests are in flight until the last N). A `Round` stores each
request's row and timing and the round's wall time (first call to last answer); one `Round` is
one line of `concurrency.jsonl`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specguard_bench.common.files import load_jsonl
from specguard_bench.common.methods import MethodOutput, check_methods, preset_of
from specguard_bench.common.rows import ProblemRow
from specguard_bench.common.settings import BenchSettings
from specguard_bench.reasoning.harness import generate, problem_row
from specguard_bench.reasoning.problems import Problem
from specguard_core.config import NormBounds


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
