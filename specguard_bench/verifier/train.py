"""Train a learned internal verifier: logistic regression (scikit-learn) on the scoring model's own
pooled hidden states over a step, optionally with scalar signals, chosen and measured by 5-fold
cross-validation grouped by problem (`GroupKFold` on `problem_ref`), saved as a verifier card.

Only features the engine has while generating may go into a card: `hidden:<layer>` with mean pooling
(`Candidate.pooled`) and the scalars in `RUNTIME_SCALARS`. Last-token pooling is measured for the
report but not offered to a card (the proposer does not pool it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specguard_bench.common.table import md_table
from specguard_bench.verifier.eval import auroc, length_controlled_auroc
from specguard_bench.verifier.features import FeatureTable
from specguard_core.engine.verify.cards import Fingerprint, VerifierCard

RUNTIME_SCALARS = ("confidence", "grounding", "mean_logprob", "n_tokens")
# the same without grounding: a card that reads no attention lets the draft skip attention capture
# (beta = 1) and is what `choose` prefers at equal length-controlled AUROC
ATTENTION_FREE_SCALARS = tuple(s for s in RUNTIME_SCALARS if s != "grounding")
C_GRID = (0.0005, 0.002, 0.01, 0.05)


@dataclass(frozen=True)
class Candidate:
    """One feature set: hidden layers (pooled by `pooling`) plus named scalars."""

    pooling: str
    layers: tuple[int, ...]
    scalars: tuple[str, ...] = ()
    C: float = 0.01

    @property
    def name(self) -> str:
        parts = [f"{self.pooling}@{','.join(map(str, self.layers))}"] if self.layers else []
        parts += list(self.scalars)
        return " + ".join(parts) + f" (C={self.C})"

    def features(self) -> list[str]:
        return [f"hidden:{layer}" for layer in self.layers] + list(self.scalars)


def design(table: FeatureTable, cand: Candidate) -> np.ndarray:
    """`[N, width]` float64 feature matrix of a candidate, in its card's feature order."""
    blocks = [table.hidden[(cand.pooling, layer)].astype(np.float64) for layer in cand.layers]
    blocks += [table.scalar(s).astype(np.float64)[:, None] for s in cand.scalars]
    return np.concatenate(blocks, axis=1)


def _model(C: float) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=3000))


def cross_validate(x: np.ndarray, y: np.ndarray, groups: np.ndarray, lengths: np.ndarray,
                   C: float, folds: int = 5) -> dict[str, Any]:
    """Out-of-fold probabilities over `folds` problem-grouped folds, and their AUROCs."""
    from sklearn.model_selection import GroupKFold

    oof = np.zeros(len(y))
    per_fold = []
    for train, test in GroupKFold(n_splits=folds).split(x, y, groups):
        model = _model(C).fit(x[train], y[train])
        oof[test] = model.predict_proba(x[test])[:, 1]
        per_fold.append(auroc(oof[test], y[test]))
    return {"auroc": auroc(oof, y), "auroc_length_controlled": length_controlled_auroc(
        oof, y, lengths), "fold_auroc": per_fold, "oof": oof}


def threshold_for_precision(p: np.ndarray, y: np.ndarray, precision: float
                            ) -> tuple[float | None, float, float]:
    """(lowest threshold whose kept steps (p >= t) are at least `precision` correct, the precision
    reached, the share of correct steps kept); None when no threshold reaches it."""
    order = np.argsort(-p, kind="stable")
    ps = p[order]
    hits = np.cumsum(y[order] == 1)
    prec = hits / np.arange(1, len(p) + 1)
    group_end = np.append(ps[1:] < ps[:-1], True)  # keeping p >= t keeps whole tie groups
    ok = np.nonzero(group_end & (prec >= precision))[0]
    if not len(ok):
        return None, float(prec[group_end].max()), 0.0
    i = int(ok.max())
    return float(p[order[i]]), float(prec[i]), float(hits[i] / max(1, (y == 1).sum()))


def search(table: FeatureTable, log: Any = print) -> list[dict[str, Any]]:
    """The candidates tried, each with its CV AUROCs, best (length-controlled) last appended."""
    y, groups, lengths = table.labels, table.groups, table.scalar("n_tokens")
    layers: Sequence[int] = table.meta["pool_layers"]
    tried: list[dict[str, Any]] = []

    def run(cand: Candidate) -> dict[str, Any]:
        res = cross_validate(design(table, cand), y, groups, lengths, cand.C)
        row = {"candidate": cand, **res}
        tried.append(row)
        log(f"{cand.name:60s} AUROC {res['auroc']:.3f}  length-ctl "
            f"{res['auroc_length_controlled']:.3f}")
        return row

    def best(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return max(rows, key=lambda r: r["auroc_length_controlled"] or 0.0)

    run(Candidate("mean", (), RUNTIME_SCALARS, 1.0))  # the scalars alone
    by_layer = [run(Candidate(pool, (layer,))) for pool in ("mean", "last") for layer in layers]
    means = sorted((r for r in by_layer if r["candidate"].pooling == "mean"),
                   key=lambda r: -(r["auroc_length_controlled"] or 0.0))
    top, second = means[0]["candidate"], means[1]["candidate"]
    by_c = [run(Candidate("mean", top.layers, (), c)) for c in C_GRID if c != top.C]
    top = best(by_c + means[:1])["candidate"]
    pair = run(Candidate("mean", tuple(sorted(top.layers + second.layers)), (), top.C))
    top = best([pair] + [r for r in tried if r["candidate"] == top])["candidate"]
    run(Candidate("mean", top.layers, RUNTIME_SCALARS, top.C))
    run(Candidate("mean", top.layers, ATTENTION_FREE_SCALARS, top.C))
    return tried


def choose(tried: list[dict[str, Any]]) -> dict[str, Any]:
    """The best runnable candidate (mean pooling) by length-controlled CV AUROC to three decimals;
    at a tie, one that needs no attention (no grounding feature), since reading attention costs
    the draft a capture on every step."""
    runnable = [r for r in tried if r["candidate"].pooling == "mean" and r["candidate"].layers]
    return max(runnable, key=lambda r: (round(r["auroc_length_controlled"] or 0.0, 3),
                                        "grounding" not in r["candidate"].scalars))


def fit_card(table: FeatureTable, row: dict[str, Any], precision: float) -> VerifierCard:
    """Fit the chosen candidate on every step; the card keeps its CV figures and the threshold that
    reaches `precision` on the out-of-fold probabilities."""
    cand: Candidate = row["candidate"]
    model = _model(cand.C).fit(design(table, cand), table.labels)
    scaler, lr = model.named_steps["standardscaler"], model.named_steps["logisticregression"]
    thr, reached, kept = threshold_for_precision(row["oof"], table.labels, precision)
    return VerifierCard(
        model=Fingerprint.model_validate(table.meta["fingerprint"]), pooling=cand.pooling,
        features=cand.features(), mean=[float(v) for v in scaler.mean_],
        scale=[float(v) for v in scaler.scale_], weights=[float(v) for v in lr.coef_[0]],
        bias=float(lr.intercept_[0]),
        cv={"folds": 5, "grouped_by": "problem_ref", "auroc": row["auroc"],
            "auroc_length_controlled": row["auroc_length_controlled"],
            "fold_auroc": row["fold_auroc"], "precision_at_threshold": reached,
            "correct_kept_at_threshold": kept},
        threshold=thr, threshold_precision=precision,
        training={"data": table.meta["data"], "n_steps": int(len(table.labels)),
                  "n_correct": int((table.labels == 1).sum()),
                  "n_wrong": int((table.labels == 0).sum()), "C": cand.C,
                  "candidate": cand.name})


def tried_markdown(tried: list[dict[str, Any]], best: dict[str, Any], card: VerifierCard) -> str:
    """Every candidate's CV AUROCs, the chosen one in bold, and the card's threshold."""
    head = ("features (pooling@layers + scalars, C)", "CV AUROC",
            "CV AUROC within length quartiles")
    rows = []
    for r in tried:
        name = r["candidate"].name
        name = f"**{name}** (card)" if r is best else name
        rows.append([name, f"{r['auroc']:.3f}", f"{r['auroc_length_controlled']:.3f}"])
    thr = "none reached" if card.threshold is None else f"{card.threshold:.3f}"
    return (md_table(head, rows) + f"\n5-fold GroupKFold by problem, {card.training['n_steps']} steps "
            f"({card.training['n_correct']} correct, {card.training['n_wrong']} wrong). Threshold "
            f"for precision {card.threshold_precision}: {thr} (out-of-fold precision "
            f"{card.cv['precision_at_threshold']:.3f}, keeps {card.cv['correct_kept_at_threshold']:.0%}"
            " of the correct steps). `last` pooling is measured only: the engine pools the mean.\n")
