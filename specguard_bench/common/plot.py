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


def pair_label(settings: Mapping[str, Any]) -> str:
    """The run's pair for a plot's title: `draft -> target`, each model's last path part."""
    return (f"{Path(str(settings.get('draft', ''))).name} -> "
            f"{Path(str(settings.get('target', ''))).name}")


def plot_bench(summary: Mapping[str, Any], path: Path) -> None:
    """Left: accuracy against median latency per problem, one labelled point per method (with its
    count and speed-up against `target`). Right: the SpecGuard methods' step acceptance rate by
    step index (point size: how many steps were scored at that index). Written to `path`."""
    plt = _pyplot()
    methods: Mapping[str, Mapping[str, Any]] = summary["methods"]
    fig, (ax_acc, ax_step) = plt.subplots(1, 2, figsize=(11, 4.2))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {n: palette[i % len(palette)] for i, n in enumerate(methods)}
    markers = "osD^vP*X"
    for i, (name, m) in enumerate(methods.items()):
        sp = m.get("speedup_vs_target")
        label = f"{name}: {m['n_correct']}/{m['n']}" + (f", {sp:.2f}x" if sp is not None else "")
        ax_acc.scatter([m["latency_median_s"]], [m["accuracy"] * 100], color=colors[name], s=50,
                       marker=markers[i % len(markers)], label=label, alpha=0.85, zorder=3)
    ax_acc.set_xlabel("median latency per problem (s)")
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.set_ylim(0, 105)
    ax_acc.set_xlim(left=0, right=max([m["latency_median_s"] for m in methods.values()] + [1]) * 1.1)
    ax_acc.set_title("accuracy vs latency (legend: correct, speed-up vs target)", fontsize=9)
    ax_acc.legend(fontsize=8, loc="best")
    for name, m in methods.items():
        counts = m.get("acceptance_by_step") or []
        points = [(i, a / n, n) for i, (a, n) in enumerate(counts) if n]
        if points:
            xs, ys, ns = zip(*points, strict=True)
            ax_step.plot(xs, [v * 100 for v in ys], color=colors[name], label=name, alpha=0.8)
            ax_step.scatter(xs, [v * 100 for v in ys], s=[8 + 4 * n for n in ns], color=colors[name])
    ax_step.set_xlabel("step index")
    ax_step.xaxis.get_major_locator().set_params(integer=True)
    ax_step.set_ylabel("draft steps accepted (%)")
    ax_step.set_ylim(-5, 105)
    ax_step.set_title("acceptance by step index (point size: steps scored)", fontsize=9)
    if ax_step.lines:
        ax_step.legend(fontsize=8)
    s = summary.get("settings", {})
    fig.suptitle(
        f"{s.get('dataset', '')} n={summary.get('n_problems', '')}: {pair_label(s)}")
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


def plot_concurrency(summary: Mapping[str, Any], path: Path) -> None:
    """Left: aggregate tokens/s against the number of concurrent clients, one line per method.
    Right: p50 (solid) and p95 (dashed) request latency against clients. Written to `path`."""
    plt = _pyplot()
    levels: Sequence[Mapping[str, Any]] = summary["levels"]
    fig, (ax_tput, ax_lat) = plt.subplots(1, 2, figsize=(11, 4.2))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    methods = list(dict.fromkeys(s["method"] for s in levels))
    for i, method in enumerate(methods):
        mine = sorted((s for s in levels if s["method"] == method), key=lambda s: s["concurrency"])
        xs = [s["concurrency"] for s in mine]
        color = palette[i % len(palette)]
        ax_tput.plot(xs, [s["tokens_per_s"] for s in mine], marker="o", color=color, label=method)
        ax_lat.plot(xs, [s["latency_p50_s"] for s in mine], marker="o", color=color,
                    label=f"{method} p50")
        ax_lat.plot(xs, [s["latency_p95_s"] for s in mine], marker="^", ls="--", color=color,
                    label=f"{method} p95")
    for ax in (ax_tput, ax_lat):
        ax.set_xlabel("concurrent clients (one engine)")
        ax.set_xticks(sorted({s["concurrency"] for s in levels}))
        ax.set_ylim(bottom=0)
        if ax.lines:
            ax.legend(fontsize=8)
    ax_tput.set_ylabel("aggregate tokens/s")
    ax_tput.set_title("throughput (all requests' new tokens / wall time)", fontsize=9)
    ax_lat.set_ylabel("request latency (s)")
    ax_lat.set_title("request latency: p50 solid, p95 dashed", fontsize=9)
    s = summary.get("settings", {})
    fig.suptitle(
        f"{s.get('dataset', '')} n={s.get('n', '')}: {pair_label(s)}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_groups(groups: Mapping[str, Mapping[str, Mapping[str, Any]]], what: str,
                settings: Mapping[str, Any], path: Path) -> None:
    """A tool-calling suite's table as bars, one group per category (BFCL) or framework (agents),
    one bar per method. Left: accuracy. Right: mean latency per task over token-level SD's
    (`latency_mean_s` over the `token-sd` row of the same group; panel left empty when that
    method did not run). `groups`: {group: {method: summary with n, n_correct, accuracy,
    latency_mean_s}}; the title is `what` and the run's pair (`settings`' draft and target).
    Written to `path`."""
    plt = _pyplot()
    names = list(groups)
    methods = list(dict.fromkeys(m for g in groups.values() for m in g))
    fig, (ax_acc, ax_lat) = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.8 / max(len(methods), 1)
    for i, method in enumerate(methods):
        xs = [g + (i - (len(methods) - 1) / 2) * width for g in range(len(names))]
        acc = [groups[n][method]["accuracy"] * 100 if method in groups[n] else 0 for n in names]
        ax_acc.bar(xs, acc, width, label=method)
        ratios = [groups[n][method]["latency_mean_s"] / groups[n]["token-sd"]["latency_mean_s"]
                  if method in groups[n] and "token-sd" in groups[n] else 0 for n in names]
        ax_lat.bar(xs, ratios, width, label=method)
    for ax in (ax_acc, ax_lat):
        ax.set_xticks(range(len(names)), names, fontsize=8)
    ax_acc.set_ylabel("accuracy (%)")
    ax_acc.set_ylim(0, 105)
    ax_acc.legend(fontsize=7, loc="upper right")
    ax_lat.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax_lat.set_ylabel("mean latency per task vs token-level SD")
    ax_acc.set_title("accuracy", fontsize=9)
    ax_lat.set_title("latency (1.0 = token-level SD)", fontsize=9)
    fig.suptitle(f"{what}: {pair_label(settings)}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
