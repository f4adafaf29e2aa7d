"""How well does a step score predict that a human-labelled step is correct?

AUROC (label 1 = correct is the positive class, higher score = "correct") of every scalar signal the
teacher-forced pass cached (`features`), the paper's ensemble r computed by the engine's own
`verifier.paper_score`, and step length alone (shorter = correct), each overall, by source and
length-controlled (AUROC within step-length quartiles, averaged), so a signal that only measures
length is seen for what it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specguard_bench.common.table import md_table
from specguard_bench.verifier.features import FeatureTable
from specguard_core.config import SpecGuardConfig
from specguard_core.engine.verify.verifier import Scores, paper_score


def auroc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """ROC AUC with label 1 positive (scikit-learn); None when only one class is present."""
    from sklearn.metrics import roc_auc_score

    labels = np.asarray(labels)
    if len(np.unique(labels)) < 2:
        return None
    return float(roc_auc_score(labels, np.asarray(scores, dtype=np.float64)))


def length_bins(lengths: np.ndarray, n_bins: int = 4) -> np.ndarray:
    """Bin index 0..n_bins-1 of each length by its quantiles (ties stay in one bin)."""
    lengths = np.asarray(lengths, dtype=np.float64)
    edges = np.quantile(lengths, np.linspace(0, 1, n_bins + 1)[1:-1])
    return np.searchsorted(edges, lengths, side="right")


def length_controlled_auroc(scores: np.ndarray, labels: np.ndarray, lengths: np.ndarray,
                            n_bins: int = 4) -> float | None:
    """Mean AUROC within step-length quantile bins (bins holding one class only are skipped)."""
    bins = length_bins(lengths, n_bins)
    scores, labels = np.asarray(scores), np.asarray(labels)
    values = [a for b in np.unique(bins) if (a := auroc(scores[bins == b], labels[bins == b]))
              is not None]
    return float(np.mean(values)) if values else None


@dataclass(frozen=True)
class Scorer:
    """A named step score: `fn(table) -> [N]`, higher meaning "more likely correct"."""

    name: str
    description: str
    fn: Callable[[FeatureTable], np.ndarray]


def paper_r(table: FeatureTable, cfg: SpecGuardConfig) -> np.ndarray:
    """The paper's ensemble r per step, by the engine's `paper_score` (bounds and beta from `cfg`)."""
    conf, ground = table.scalar("confidence"), table.scalar("grounding")
    return np.asarray([paper_score(Scores(float(c), float(g)), cfg)
                       for c, g in zip(conf, ground, strict=True)])


def scorers(table: FeatureTable, cfg: SpecGuardConfig) -> list[Scorer]:
    """Every scalar scorer the cache supports (probes are scored by `train`)."""
    def col(name: str, sign: float = 1.0) -> Callable[[FeatureTable], np.ndarray]:
        return lambda t: sign * t.scalar(name)

    out = [
        Scorer("paper r", f"beta {cfg.beta} l~ + (1-beta) g~, the shipped bounds", lambda t:
               paper_r(t, cfg)),
        Scorer("confidence l", "min token log-prob", col("confidence")),
        Scorer("grounding g", "min rollout mass on context, last 3 layers", col("grounding")),
        Scorer("mean log-prob", "mean token log-prob", col("mean_logprob")),
        Scorer("-mean entropy", "mean token entropy (lower = correct)", col("entropy_mean", -1)),
        Scorer("-max entropy", "max token entropy (lower = correct)", col("entropy_max", -1)),
        Scorer("g residual", "g with rollout residual 0.5A+0.5I", col("grounding_residual")),
        Scorer("g mean", "mean over tokens instead of min", col("grounding_mean")),
        Scorer("g mean residual", "mean over tokens, with residual",
               col("grounding_mean_residual")),
    ]
    names: list[str] = table.meta["scalar_names"]
    out += [Scorer(f"g {n[len('grounding_'):]}", "min rollout mass, "
                   + ("rollout over the last layers" if "last" in n else "that layer alone"), col(n))
            for n in names if n.startswith("grounding_last") or n.startswith("grounding_layer")]
    out.append(Scorer("step length", "-(tokens in the step): shorter = correct",
                      col("n_tokens", -1)))
    return out


def evaluate(scores: np.ndarray, table: FeatureTable) -> dict[str, Any]:
    """`auroc`, `auroc_length_controlled`, counts, overall and by source."""
    lengths = table.scalar("n_tokens")

    def one(mask: np.ndarray) -> dict[str, Any]:
        y = table.labels[mask]
        return {"auroc": auroc(scores[mask], y),
                "auroc_length_controlled": length_controlled_auroc(scores[mask], y, lengths[mask]),
                "n_correct": int((y == 1).sum()), "n_wrong": int((y == 0).sum())}

    entry = one(np.ones(len(scores), dtype=bool))
    entry["by_source"] = {s: one(table.source == s) for s in sorted(set(table.source.tolist()))}
    return entry


def summarise(table: FeatureTable, cfg: SpecGuardConfig, default: str | None = "paper r",
              extra: Mapping[str, tuple[str, np.ndarray]] | None = None) -> dict[str, Any]:
    """The summary: one entry per scorer (`extra` adds named score arrays, e.g. a probe's
    out-of-fold predictions); the engine's default verifier for this model is marked
    `"default": true` (`default=None`: none of these, e.g. a shipped card is the default)."""
    entries: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    all_scorers = [(s.name, s.description, s.fn(table)) for s in scorers(table, cfg)]
    all_scorers += [(n, d, a) for n, (d, a) in (extra or {}).items()]
    for name, description, values in all_scorers:
        arrays[name] = values
        entries[name] = {"description": description, **evaluate(values, table),
                         "default": name == default}
    return {"model": table.meta["fingerprint"], "data": table.meta["data"],
            "n_steps": int(len(table.labels)), "n_solutions": int(len(set(table.ids.tolist()))),
            "scorers": entries, "_arrays": arrays}


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def markdown(summary: Mapping[str, Any]) -> str:
    """A table: scorer, AUROC and length-controlled AUROC overall and by source."""
    sources = sorted({s for e in summary["scorers"].values() for s in e["by_source"]})
    head = ["scorer", "AUROC", "AUROC within length quartiles"]
    for s in sources:
        head += [f"{s} AUROC", f"{s} length-ctl"]
    rows = []
    for name, e in summary["scorers"].items():
        cells = [f"**{name}** (default)" if e["default"] else name, _fmt(e["auroc"]),
                 _fmt(e["auroc_length_controlled"])]
        for s in sources:
            b = e["by_source"].get(s, {})
            cells += [_fmt(b.get("auroc")), _fmt(b.get("auroc_length_controlled"))]
        rows.append(cells)
    first = next(iter(summary["scorers"].values()))
    counts = f"{first['n_correct']} correct / {first['n_wrong']} wrong steps"
    return (f"Model: `{summary['model']['name']}`; data: `{summary['data']}`; "
            f"{summary['n_solutions']} solutions, {counts}.\n\n" + md_table(head, rows))


def plot_roc(summary: Mapping[str, Any], labels: np.ndarray, path: Path,
             names: list[str] | None = None) -> None:
    """ROC curves (true-positive rate of correct steps against false-positive rate)."""
    from sklearn.metrics import roc_curve

    from specguard_bench.common.plot import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 5))
    arrays: Mapping[str, np.ndarray] = summary["_arrays"]
    for name in names or list(arrays):
        if name not in arrays:
            continue
        fpr, tpr, _ = roc_curve(labels, arrays[name])
        ax.plot(fpr, tpr, label=f"{name} ({summary['scorers'][name]['auroc']:.2f})")
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("false-positive rate (wrong steps scored as correct)")
    ax.set_ylabel("true-positive rate (correct steps)")
    ax.set_title(f"step correctness, {summary['model']['name']}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(summary: Mapping[str, Any], labels: np.ndarray, out: Path, stem: str,
                 plot_names: list[str]) -> list[Path]:
    """`<stem>.json` (without the raw arrays), `<stem>.md` and `<stem>-roc.png` under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.json", out / f"{stem}.md", out / f"{stem}-roc.png"]
    clean = {k: v for k, v in summary.items() if not k.startswith("_")}
    paths[0].write_text(json.dumps(clean, indent=1) + "\n")
    paths[1].write_text(markdown(summary))
    plot_roc(summary, labels, paths[2], plot_names)
    return paths
