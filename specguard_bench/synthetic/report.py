"""The synthetic mode's report files: `synthetic.json`, `synthetic.md` (tables), `synthetic.png`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specguard_bench.common.metrics import fmt_cell


def synthetic_markdown(report: Mapping[str, Any]) -> str:
    """The report's tables as markdown."""
    lines = [
        f"# Synthetic timing ({report['size']}, {report['device']}, {report['dtype']})\n",
        f"draft {report['draft_params'] / 1e6:.1f}M params, target "
        f"{report['target_params'] / 1e6:.1f}M params; {report['steps']} steps x "
        f"{report['step_tokens']} tokens; preset {report['preset']} (k={report['k']}, "
        f"fallback {report['fallback']}); target only {report['target_latency_s']:.3f} s, "
        f"draft only {report['draft_latency_s']:.3f} s per run.\n",
        "| requested | achieved | tau | SpecGuard s | ideal s | vs target | measured/ideal |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["acceptance"]:
        ratio = r["measured_over_ideal"]
        lines.append(
            f"| {r['requested']:.0%} | {r['achieved']:.0%} | {r['tau']:.3f} | "
            f"{r['latency_s']:.3f} | {r['ideal_latency_s']:.3f} | {r['speedup_vs_target']:.2f}x | "
            f"{fmt_cell(ratio, '.2f', 'x')} |"
        )
    lines += [
        "",
        "| k | propose ms/step | select ms/step | score ms/step | s per run |",
        "|---|---|---|---|---|",
    ]
    for r in report["k_sweep"]:
        ps = r["per_step_s"]
        lines.append(
            f"| {r['k']} | {ps.get('propose', 0) * 1e3:.1f} | {ps.get('select', 0) * 1e3:.2f} | "
            f"{ps.get('score', 0) * 1e3:.2f} | {r['latency_s']:.3f} |"
        )
    cap = report["capture"]
    share = cap["capture_share_of_propose"]
    lines += [
        "",
        "Grounding capture: propose time per step with capture off (beta=1, 0 layers) and with the "
        f"last layers captured; at the default {cap['default_layers']} layers capture is "
        f"{fmt_cell(share, '.0%')} of propose time.",
        "",
        "| captured layers | propose ms/step | score ms/step |",
        "|---|---|---|",
    ]
    for r in cap["layers_sweep"]:
        lines.append(
            f"| {r['grounding_layers'] or 'off'} | {r['propose_per_step_s'] * 1e3:.1f} | "
            f"{r['score_per_step_s'] * 1e3:.2f} |"
        )
    return "\n".join(lines) + "\n"


def write_synthetic(out_dir: Path, report: Mapping[str, Any]) -> None:
    """Write synthetic.json, synthetic.md and synthetic.png."""
    from specguard_bench.common.plot import plot_synthetic

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "synthetic.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out_dir / "synthetic.md").write_text(synthetic_markdown(report))
    plot_synthetic(report, out_dir / "synthetic.png")
