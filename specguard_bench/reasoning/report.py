"""The reasoning benchmark's reports, rewritten at the end of every run from all rows of the
selected problems and methods: `summary.json` (settings, bounds, each SpecGuard method's full
config, the environment, per-method summaries and drift), `results.md` (the tables) and
`results.png`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specguard_bench.common.environment import machine_line
from specguard_bench.common.methods import REMOTE_METHOD, preset_of, specguard_config
from specguard_bench.common.metrics import markdown_table, summarize
from specguard_bench.common.rows import ProblemRow
from specguard_bench.common.settings import BenchSettings
from specguard_bench.common.store import stored_path
from specguard_bench.reasoning.drift import drift_summary, drift_table
from specguard_core.config import NormBounds, SpecGuardConfig

SUMMARY, TABLE, PLOT = "summary.json", "results.md", "results.png"


def build_summary(
    rows: Sequence[ProblemRow],
    settings: BenchSettings,
    bounds: NormBounds | None,
    base: SpecGuardConfig,
    env: Mapping[str, Any],
) -> dict[str, Any]:
    """The summary JSON: settings, bounds (path and values), the full config of each SpecGuard
    method (from the engine's `base` config), the environment `env`, and one `MethodSummary`
    per method."""
    summaries = summarize(rows, settings.methods)
    drifts = drift_summary(rows, settings.methods)
    configs = {
        m: specguard_config(
            base, m, settings.sets, max_new_tokens=settings.max_new_tokens, bounds=bounds
        ).model_dump(mode="json")
        for m in settings.methods
        if preset_of(m) is not None
    }
    used = bounds if bounds is not None else base.bounds
    return {
        "settings": {
            **settings.fingerprint(bounds),
            "dataset": settings.dataset_file.stem if settings.dataset_file else settings.dataset,
            "dataset_file": stored_path(settings.dataset_file) if settings.dataset_file else None,
            "n": settings.n,
            "offset": settings.offset,
            "methods": list(settings.methods),
            "out_dir": stored_path(settings.out_dir),
        },
        "bounds": {
            "path": stored_path(settings.bounds_path) if settings.bounds_path else None,
            "values": used.model_dump(),
            "calibrated": bounds is not None,
        },
        "configs": configs,
        "environment": dict(env),
        "n_problems": len({r.uid for r in rows}),
        "methods": {m: s.to_dict() for m, s in summaries.items()},
        "table": markdown_table(summaries),
        "drift": {m: d.to_dict() for m, d in drifts.items()},
        "drift_table": drift_table(drifts),
    }


def write_reports(out_dir: Path, summary: Mapping[str, Any]) -> None:
    """Write summary.json, results.md (table + settings) and results.png."""
    from specguard_bench.common.plot import plot_bench

    (out_dir / SUMMARY).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    s = summary["settings"]
    header = (
        f"# SpecGuard benchmark: {s['dataset']} problems {s['offset']}.."
        f"{s['offset'] + summary['n_problems'] - 1}\n\n"
        f"draft `{s['draft']}`, target `{s['target']}`"
        + (f" ({REMOTE_METHOD}: `{s['served_target']['model']}` at {s['served_target']['url']})"
           if "served_target" in s else "")
        + f", {machine_line(summary['environment'])}, {s['dtype']}, max {s['max_new_tokens']} new "
        f"tokens, bounds: {summary['bounds']['path'] or 'defaults (uncalibrated)'}\n\n"
    )
    drift = summary.get("drift_table") or ""
    (out_dir / TABLE).write_text(header + summary["table"]
                                 + (f"\n## Drift from the target's text\n\n{drift}" if drift else ""))
    plot_bench(summary, out_dir / PLOT)
