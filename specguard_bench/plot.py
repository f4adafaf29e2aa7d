"""Plots of a benchmark summary and of a synthetic report (matplotlib, Agg backend, PNG files).

matplotlib is imported inside the functions, with the non-interactive Agg backend, so importing
this module is cheap and never needs a display.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_bench(summary: Mapping[str, Any], path: Path) -> None:
    """Two panels per method: accuracy (with counts) and median latency per problem (with the
    speed-up against `target`), written to `path`."""
    plt = _pyplot()
    methods: Mapping[str, Mapping[str, Any]] = summary["methods"]
    names = list(methods)
    fig, (ax_acc, ax_lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = ["#4c72b0" if not n.startswith("specguard") else "#dd8452" for n in names]
    acc = [methods[n]["accuracy"] * 100 for n in names]
    bars = ax_acc.bar(names, acc, color=colors)
    for bar, n in zip(bars, names, strict=True):
        m = methods[n]
        ax_acc.annotate(
            f"{m['n_correct']}/{m['n']}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.set_ylim(0, max([*acc, 1.0]) * 1.2)
    lat = [methods[n]["latency_median_s"] for n in names]
    bars = ax_lat.bar(names, lat, color=colors)
    for bar, n in zip(bars, names, strict=True):
        sp = methods[n].get("speedup_vs_target")
        label = f"{sp:.2f}x" if sp is not None else ""
        ax_lat.annotate(
            label,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax_lat.set_ylabel("median latency per problem (s)")
    ax_lat.set_title("labels: speed-up vs target", fontsize=9)
    s = summary.get("settings", {})
    fig.suptitle(
        f"{s.get('dataset', '')} n={summary.get('n_problems', '')}: "
        f"{Path(str(s.get('draft', ''))).name} -> {Path(str(s.get('target', ''))).name}"
    )
    for ax in (ax_acc, ax_lat):
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_synthetic(report: Mapping[str, Any], path: Path) -> None:
    """Left: latency per run for each forced acceptance rate (SpecGuard measured, its ideal, and
    target-only / draft-only as lines). Right: per-step phase time for each k."""
    plt = _pyplot()
    fig, (ax_rate, ax_k) = plt.subplots(1, 2, figsize=(11, 4.2))
    rates: Sequence[Mapping[str, Any]] = report["acceptance"]
    labels = [f"{r['requested']:.0%}\n(got {r['achieved']:.0%})" for r in rates]
    xs = range(len(rates))
    width = 0.38
    ax_rate.bar(
        [x - width / 2 for x in xs],
        [r["latency_s"] for r in rates],
        width,
        label="SpecGuard measured",
        color="#dd8452",
    )
    ax_rate.bar(
        [x + width / 2 for x in xs],
        [r["ideal_latency_s"] for r in rates],
        width,
        label="ideal",
        color="#55a868",
    )
    ax_rate.axhline(report["target_latency_s"], color="#4c72b0", ls="--", label="target only")
    ax_rate.axhline(report["draft_latency_s"], color="#8172b3", ls=":", label="draft only")
    ax_rate.set_xticks(list(xs), labels)
    ax_rate.set_xlabel("forced acceptance rate")
    ax_rate.set_ylabel("latency per run (s)")
    ax_rate.legend(fontsize=8)
    ks: Sequence[Mapping[str, Any]] = report["k_sweep"]
    bottom = [0.0] * len(ks)
    for phase, color in (("propose", "#dd8452"), ("select", "#c44e52"), ("score", "#937860")):
        vals = [k["per_step_s"].get(phase, 0.0) * 1000 for k in ks]
        ax_k.bar([str(k["k"]) for k in ks], vals, bottom=bottom, label=phase, color=color)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax_k.set_xlabel("k (draft candidates)")
    ax_k.set_ylabel("ms per step (all accepted)")
    ax_k.legend(fontsize=8)
    fig.suptitle(
        f"synthetic ({report['size']}): {report['step_tokens']} tokens/step, "
        f"{report['steps']} steps, device {report['device']}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
