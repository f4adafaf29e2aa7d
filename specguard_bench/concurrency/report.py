"""The figures and reports of `--concurrency`: one `LevelSummary` per round (throughput, latency
percentiles, each compared with the same method's level-1 round), `concurrency.json`,
`concurrency.md` and `concurrency.png`, rewritten at the end of every run."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specguard_bench.common.environment import machine_line
from specguard_bench.common.metrics import fmt_cell
from specguard_bench.common.table import md_table
from specguard_bench.concurrency.rounds import Round

SUMMARY, TABLE, PLOT = "concurrency.json", "concurrency.md", "concurrency.png"


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100), numpy's linear interpolation between order statistics."""
    if not values:
        raise ValueError("percentile of no values")
    return float(np.percentile(values, q))


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


_HEAD = ("method", "clients", "requests", "wall s", "tokens", "tok/s", "tok/s vs N=1", "p50 s",
         "p95 s", "p50 vs N=1", "p95 vs N=1", "correct", "same text as N=1", "rows/forward")


def markdown_table(summaries: Sequence[LevelSummary]) -> str:
    """The level summaries as a GitHub markdown table (one row per method and level)."""
    return md_table(_HEAD, (_row(s) for s in summaries))


def _row(s: LevelSummary) -> list[str]:
    same = "–" if s.same_text_as_1 is None else f"{s.same_text_as_1}/{s.requests}"
    return [s.method, str(s.concurrency), str(s.requests), f"{s.wall_s:.2f}", str(s.new_tokens),
            f"{s.tokens_per_s:.2f}", fmt_cell(s.throughput_vs_1, ".2f", "x"),
            f"{s.latency_p50_s:.2f}", f"{s.latency_p95_s:.2f}", fmt_cell(s.p50_vs_1, ".2f", "x"),
            fmt_cell(s.p95_vs_1, ".2f", "x"), f"{s.n_correct}/{s.requests}", same,
            fmt_cell(s.rows_per_forward, ".2f", "")]


def write_reports(out_dir: Path, summary: Mapping[str, Any]) -> None:
    """Write concurrency.json, concurrency.md (settings line + table) and concurrency.png."""
    from specguard_bench.common.plot import plot_concurrency

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
