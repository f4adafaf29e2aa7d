"""The synthetic mode's report files: `synthetic.json`, `synthetic.md` (tables), `synthetic.png`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specguard_bench.common.metrics import fmt_cell
from specguard_bench.common.table import md_table


def synthetic_markdown(report: Mapping[str, Any]) -> str:
    """The report's tables as markdown."""
    acceptance = md_table(
        ("requested", "achieved", "tau", "SpecGuard s", "ideal s", "vs target", "measured/ideal"),
        ([f"{r['requested']:.0%}", f"{r['achieved']:.0%}", f"{r['tau']:.3f}",
          f"{r['latency_s']:.3f}", f"{r['ideal_latency_s']:.3f}", f"{r['speedup_vs_target']:.2f}x",
          fmt_cell(r["measured_over_ideal"], ".2f", "x")] for r in report["acceptance"]))
    k_sweep = md_table(
        ("k", "propose ms/step", "select ms/step", "score ms/step", "s per run"),
        ([str(r["k"]), f"{r['per_step_s'].get('propose', 0) * 1e3:.1f}",
          f"{r['per_step_s'].get('select', 0) * 1e3:.2f}",
          f"{r['per_step_s'].get('score', 0) * 1e3:.2f}", f"{r['latency_s']:.3f}"]
         for r in report["k_sweep"]))
    cap = report["capture"]
    layers = md_table(
        ("captured layers", "propose ms/step", "score ms/step"),
        ([str(r["grounding_layers"] or "off"), f"{r['propose_per_step_s'] * 1e3:.1f}",
          f"{r['score_per_step_s'] * 1e3:.2f}"] for r in cap["layers_sweep"]))
    return (
        f"# Synthetic timing ({report['size']}, {report['device']}, {report['dtype']})\n\n"
        f"draft {report['draft_params'] / 1e6:.1f}M params, target "
        f"{report['target_params'] / 1e6:.1f}M params; {report['steps']} steps x "
        f"{report['step_tokens']} tokens; preset {report['preset']} (k={report['k']}, "
        f"fallback {report['fallback']}); target only {report['target_latency_s']:.3f} s, "
        f"draft only {report['draft_latency_s']:.3f} s per run.\n\n"
        + acceptance + "\n" + k_sweep
        + "\nGrounding capture: propose time per step with capture off (beta=1, 0 layers) and with "
        f"the last layers captured; at the default {cap['default_layers']} layers capture is "
        f"{fmt_cell(cap['capture_share_of_propose'], '.0%')} of propose time.\n\n" + layers)


def write_synthetic(out_dir: Path, report: Mapping[str, Any]) -> None:
    """Write synthetic.json, synthetic.md and synthetic.png."""
    from specguard_bench.common.plot import plot_synthetic

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "synthetic.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out_dir / "synthetic.md").write_text(synthetic_markdown(report))
    plot_synthetic(report, out_dir / "synthetic.png")
