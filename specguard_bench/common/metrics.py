"""Per-method summaries of a run's rows, speed-ups, and the results table.

`summarize` turns `ProblemRow`s (`rows`) into one `MethodSummary` per method; speed-ups are ratios
of summed latency over the problems both methods ran (i.e. ratios of mean latency on a common set).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specguard_bench.common.rows import ProblemRow
from specguard_bench.common.table import md_table

OVERHEAD_PHASES = ("select", "score")


def acceptance_by_step(rows: Iterable[ProblemRow]) -> list[list[int]] | None:
    """`[accepted, scored]` draft steps per step index over the rows' step traces (index 0 is each
    run's first step); None when no row has a trace (baselines, rows of older versions)."""
    traces = [r.step_trace for r in rows if r.step_trace is not None]
    if not traces:
        return None
    counts: list[list[int]] = []
    for trace in traces:
        for step in trace:
            if step["score"] is None:
                continue
            while len(counts) <= step["index"]:
                counts.append([0, 0])
            counts[step["index"]][0] += bool(step["accepted"])
            counts[step["index"]][1] += 1
    return counts


@dataclass
class MethodSummary:
    """Aggregates of one method over its rows. Fractions/rates are None where they do not apply
    (e.g. step acceptance for a baseline). `speedup_vs_*` are filled by `add_speedups`."""

    method: str
    n: int
    n_correct: int
    accuracy: float
    latency_median_s: float
    latency_mean_s: float
    tokens_per_s: float
    new_tokens_mean: float
    truncated: int
    target_step_fraction: float | None
    target_token_fraction: float | None
    acceptance_rate: float | None
    overhead_share: float | None
    prefilled_draft_mean: float | None
    prefilled_target_mean: float | None
    measured_over_ideal: float | None
    kept_steps: float | None = None  # totals over the rows
    checked_steps: float | None = None
    regenerated_steps: float | None = None
    tokens_per_target_forward: float | None = None
    draft_wasted_mean: float | None = None
    acceptance_by_step: list[list[int]] | None = None  # [accepted, scored] per step index
    speedup_vs_target: float | None = None
    speedup_vs_token_sd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def _sum_opt(values: Iterable[int | float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(sum(vals)) if vals else None


def _mean_opt(values: Iterable[int | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def _token_fraction(method: str, rows: Sequence[ProblemRow]) -> float | None:
    if method == "target":
        return 1.0
    if method == "draft":
        return 0.0
    target = _sum_opt(r.target_tokens for r in rows)
    draft = _sum_opt(r.draft_tokens for r in rows)
    if target is None or draft is None:
        return None
    return _ratio(target, target + draft)


def summarize_method(method: str, rows: Sequence[ProblemRow]) -> MethodSummary:
    """Aggregate the rows of one method (`rows` must be non-empty and all of `method`)."""
    if not rows:
        raise ValueError(f"no rows for {method}")
    lat = [r.latency_s for r in rows]
    total_lat = sum(lat)
    n_correct = sum(r.correct for r in rows)
    steps, target_steps = _sum_opt(r.steps for r in rows), _sum_opt(r.target_steps for r in rows)
    scored, accepted = (
        _sum_opt(r.scored_steps for r in rows),
        _sum_opt(r.accepted_steps for r in rows),
    )
    overhead = [sum(r.phase_s.get(p, 0.0) for p in OVERHEAD_PHASES) for r in rows if r.phase_s]
    ideal = _sum_opt(r.ideal_latency_s for r in rows)
    return MethodSummary(
        method=method,
        n=len(rows),
        n_correct=n_correct,
        accuracy=n_correct / len(rows),
        latency_median_s=statistics.median(lat),
        latency_mean_s=statistics.fmean(lat),
        tokens_per_s=_ratio(sum(r.new_tokens for r in rows), total_lat) or 0.0,
        new_tokens_mean=statistics.fmean(r.new_tokens for r in rows),
        truncated=sum(r.finish_reason == "length" for r in rows),
        target_step_fraction=_ratio(target_steps, steps)
        if steps is not None and target_steps is not None
        else None,
        target_token_fraction=_token_fraction(method, rows),
        acceptance_rate=_ratio(accepted, scored) if accepted is not None and scored else None,
        overhead_share=_ratio(sum(overhead), total_lat) if overhead else None,
        prefilled_draft_mean=_mean_opt(r.prefilled_draft for r in rows),
        prefilled_target_mean=_mean_opt(r.prefilled_target for r in rows),
        measured_over_ideal=_ratio(total_lat, ideal) if ideal is not None else None,
        acceptance_by_step=acceptance_by_step(rows),
        kept_steps=_sum_opt(r.kept_steps for r in rows),
        checked_steps=_sum_opt(r.checked_steps for r in rows),
        regenerated_steps=_sum_opt(r.regenerated_steps for r in rows),
        tokens_per_target_forward=_tokens_per_target_forward(method, rows),
        draft_wasted_mean=_mean_opt(r.draft_wasted for r in rows),
    )


def _tokens_per_target_forward(method: str, rows: Sequence[ProblemRow]) -> float | None:
    """Output tokens per target forward pass: 1 for the target alone (one pass per token, the
    prompt's included), unknown for token-sd (transformers does not report it), None for the
    draft alone."""
    if method == "target":
        return 1.0
    forwards = _sum_opt(r.target_forwards for r in rows)
    if forwards is None:
        return None
    return _ratio(sum(r.new_tokens for r in rows if r.target_forwards is not None), forwards)


def speedup(rows: Sequence[ProblemRow], method: str, baseline: str) -> float | None:
    """Summed latency of `baseline` over summed latency of `method`, on the problems both ran;
    None if they share none. >1 means `method` is faster."""
    by = {(r.uid, r.method): r.latency_s for r in rows}
    common = [u for (u, m) in by if m == method and (u, baseline) in by]
    if not common:
        return None
    return _ratio(sum(by[u, baseline] for u in common), sum(by[u, method] for u in common))


def summarize(rows: Sequence[ProblemRow], methods: Sequence[str]) -> dict[str, MethodSummary]:
    """One summary per method in `methods` that has rows, in that order, speed-ups included
    (against `target` and `token-sd` when those ran)."""
    out: dict[str, MethodSummary] = {}
    for method in methods:
        mine = [r for r in rows if r.method == method]
        if not mine:
            continue
        summary = summarize_method(method, mine)
        summary.speedup_vs_target = speedup(rows, method, "target")
        summary.speedup_vs_token_sd = speedup(rows, method, "token-sd")
        out[method] = summary
    return out


def fmt_cell(value: float | None, spec: str, suffix: str = "") -> str:
    """A table cell: `value` formatted with `spec` and `suffix`, or "–" when it is missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:{spec}}{suffix}"


def _paths(s: MethodSummary) -> str:
    counts = (s.kept_steps, s.checked_steps, s.regenerated_steps)
    return "–" if None in counts else "/".join(f"{c:.0f}" for c in counts if c is not None)


_HEAD = (
    "method", "accuracy", "median s", "mean s", "tok/s", "vs target", "vs token-sd",
    "target steps", "target tokens", "acceptance", "select+score", "prefilled draft/target",
    "measured/ideal", "kept/checked/regen steps", "tok/target fwd", "draft wasted", "truncated",
)


def markdown_table(summaries: Mapping[str, MethodSummary]) -> str:
    """The summaries as a GitHub markdown table (one row per method)."""
    return md_table(_HEAD, (_row(s) for s in summaries.values()))


def _row(s: MethodSummary) -> list[str]:
    return [
        s.method, f"{s.accuracy:.1%} ({s.n_correct}/{s.n})", f"{s.latency_median_s:.2f}",
        f"{s.latency_mean_s:.2f}", f"{s.tokens_per_s:.1f}",
        fmt_cell(s.speedup_vs_target, ".2f", "x"), fmt_cell(s.speedup_vs_token_sd, ".2f", "x"),
        fmt_cell(s.target_step_fraction, ".1%"), fmt_cell(s.target_token_fraction, ".1%"),
        fmt_cell(s.acceptance_rate, ".1%"), fmt_cell(s.overhead_share, ".1%"),
        f"{fmt_cell(s.prefilled_draft_mean, '.0f')}/{fmt_cell(s.prefilled_target_mean, '.0f')}",
        fmt_cell(s.measured_over_ideal, ".2f", "x"), _paths(s),
        fmt_cell(s.tokens_per_target_forward, ".2f"), fmt_cell(s.draft_wasted_mean, ".0f"),
        str(s.truncated),
    ]
