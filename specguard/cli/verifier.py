"""`specguard verifier-eval` (how well do the step scores track human step labels?),
`specguard verifier-train` (fit a hidden-state probe and save it as a verifier card) and
`specguard verifier-stamp` (record a model's weight digest in cards or bounds files fitted on it).

Both teacher-force every labelled solution once through the scoring model and cache the per-step
features in the features folder (`--out` of verifier-eval, `--features` of verifier-train), so the
second command reuses the first one's pass; an interrupted pass resumes from its last chunk.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET

DEFAULT_BOUNDS = {"draft": Path("benchmarks/bounds-qwen2.5-coder-0.5b.json"),
                  "target": Path("benchmarks/bounds-qwen2.5-coder-1.5b-target-scored.json")}
ROC_NAMES = ["paper r", "confidence l", "grounding g", "mean log-prob", "-max entropy",
             "step length", "probe (5-fold CV)"]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="step-labelled JSONL (steps_README.md format)")
    p.add_argument("--model", default="draft",
                   help="scoring model: draft, target, or a model name/path (default draft)")
    p.add_argument("--limit", type=int, help="only the first N solutions")
    p.add_argument("--device", default="cpu", help="cpu, cuda, auto (default cpu)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_verifier_parsers(sub: Any) -> None:
    p = sub.add_parser("verifier-eval", help="AUROC of the step scores on human step labels")
    _common(p)
    p.add_argument("--out", help="features + report folder (default verifier-eval/<model>)")
    p.add_argument("--bounds", help="normaliser bounds for the paper's r (default: the shipped "
                   "bounds of the default draft/target)")
    p.set_defaults(func=cmd_eval)
    t = sub.add_parser("verifier-train", help="fit a hidden-state probe, save a verifier card")
    _common(t)
    t.add_argument("--features", help="features folder (default verifier-eval/<model>, the "
                   "verifier-eval default; extracted there first when missing)")
    t.add_argument("--out", required=True, help="verifier card JSON to write")
    t.add_argument("--precision", type=float, default=0.95,
                   help="precision the card's decision threshold is chosen for (default 0.95)")
    t.set_defaults(func=cmd_train)
    s = sub.add_parser("verifier-stamp", help="record a model's weight digest in the verifier "
                       "cards or shipped bounds files fitted on it")
    s.add_argument("files", nargs="+", help="verifier card or bounds JSON files fitted on --model "
                   "(rewritten in place)")
    s.add_argument("--model", default="draft",
                   help="the model they were fitted on: draft, target, or a model name/path "
                   "(default draft)")
    s.add_argument("--device", default="cpu", help="cpu, cuda, auto (default cpu)")
    s.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                   help="load dtype; the digest does not depend on it (default bfloat16)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_stamp)


def _model_ref(model: str) -> str:
    return {"draft": DEFAULT_DRAFT, "target": DEFAULT_TARGET}.get(model, model)


def _features_dir(args: argparse.Namespace, given: str | None) -> Path:
    return Path(given) if given else Path("verifier-eval") / Path(args.model).name


def _features(args: argparse.Namespace, folder: Path) -> tuple[Any, int]:
    """Teacher-force (resuming from the cache) and load the features of the selected solutions."""
    import torch

    from specguard_bench.verifier.data import data_ref, load_labelled
    from specguard_bench.verifier.features import extract, load_features
    from specguard_core.cache.handle import ModelHandle
    from specguard_core.models.loading import load_model

    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be >= 1")
    sols = load_labelled(args.data, args.limit)  # checked before any model is loaded
    model, tokenizer = load_model(_model_ref(args.model), device=args.device, dtype=args.dtype,
                                  progress=not args.no_progress)
    with torch.inference_mode():
        extract(ModelHandle(model, tokenizer), sols, folder, data_ref(args.data),
                progress=not args.no_progress)
    return load_features(folder, len(sols)), len(sols)


def _config(args: argparse.Namespace) -> Any:
    from specguard_core.config import NormBounds, SpecGuardConfig

    path = Path(args.bounds) if getattr(args, "bounds", None) else DEFAULT_BOUNDS.get(args.model)
    if path is None:
        print("note: no --bounds for this model; the paper's r uses the default bounds")
        return SpecGuardConfig()
    return SpecGuardConfig(bounds=NormBounds.load(path))


def _default_scorer(table: Any) -> str | None:
    """The scorer marked default: the paper's r, unless a card ships for the scored model (then
    `verifier="auto"` uses that card, which is not one of the tables' rows)."""
    from specguard_core.engine.verify.cards import Fingerprint, shipped_card_for

    card = shipped_card_for(Fingerprint.model_validate(table.meta["fingerprint"]))
    if card is None:
        return "paper r"
    print(f"note: the default verifier for this model is the shipped card {card}")
    return None


def cmd_eval(args: argparse.Namespace) -> int:
    from specguard_bench.verifier.eval import markdown, summarise, write_report

    folder = _features_dir(args, args.out)
    table, _ = _features(args, folder)
    summary = summarise(table, _config(args), _default_scorer(table))
    paths = write_report(summary, table.labels, folder, "verifier-eval", ROC_NAMES)
    print(markdown(summary))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from specguard_bench.verifier.eval import summarise, write_report
    from specguard_bench.verifier.train import choose, fit_card, search, tried_markdown

    if not 0 < args.precision < 1:
        raise ValueError("--precision must be between 0 and 1")
    folder = _features_dir(args, args.features)
    table, _ = _features(args, folder)
    tried = search(table)
    best = choose(tried)
    card = fit_card(table, best, args.precision)
    card.save(args.out)
    (folder / "verifier-train.md").write_text(tried_markdown(tried, best, card))
    summary = summarise(table, _config(args), _default_scorer(table), extra={
        "probe (5-fold CV)": (f"{best['candidate'].name}, out-of-fold", best["oof"])})
    write_report(summary, table.labels, folder, "verifier-probe", ROC_NAMES)
    print(tried_markdown(tried, best, card))
    print(f"wrote {args.out} and {folder}/verifier-train.md, verifier-probe.*")
    return 0


def cmd_stamp(args: argparse.Namespace) -> int:
    """Load --model, then stamp each file with its weight digest (checked against its config)."""
    from specguard_core.engine.verify.fingerprint import Fingerprint, fingerprint, stamp
    from specguard_core.models.loading import load_model

    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:  # before the model loads
        raise FileNotFoundError(f"{missing[0]} not found; pass verifier card or bounds JSON files")
    model, tokenizer = load_model(_model_ref(args.model), device=args.device, dtype=args.dtype,
                                  progress=not args.no_progress)
    here = Fingerprint.model_validate(fingerprint(model, tokenizer))
    for f in args.files:
        changed = stamp(f, here)
        print(f"{f}: {'stamped with' if changed else 'already has'} the weight digest "
              f"{here.weights_sha256} of {here.name}")
    return 0
