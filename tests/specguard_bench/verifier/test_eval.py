"""verifier-eval: AUROC maths, the labelled-file checks, and that teacher-forced features equal what
the engine computes while generating the same tokens after the same prefix (tiny random models)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from specguard_bench.verifier.data import LabelledDataError, load_labelled
from specguard_bench.verifier.eval import auroc, length_bins, length_controlled_auroc
from specguard_bench.verifier.features import (
    prompt_token_ids,
    scalar_names,
    teacher_force_ids,
)
from specguard_core.cache import capture
from specguard_core.cache.handle import ModelHandle
from specguard_core.config import SpecGuardConfig
from specguard_core.decoding.proposal import SampleSpec
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.engine.proposer import propose
from specguard_core.engine.verify.cards import Fingerprint, VerifierCard, fingerprint, load_probe
from specguard_core.engine.verify.verifier import draft_scores
from specguard_core.text.steps import StepRules


def test_auroc_matches_sklearn() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    s = rng.normal(size=200) + y
    assert auroc(s, y) == pytest.approx(roc_auc_score(y, s))
    assert auroc(s, np.ones(200)) is None  # one class: undefined, not a number


def test_length_controlled_auroc_hand_case() -> None:
    # four length quartiles of two steps each (one correct, one wrong); score orders them right
    # in three bins and wrong in one: mean within-bin AUROC = (1 + 1 + 0 + 1) / 4
    lengths = np.array([10, 10, 20, 20, 30, 30, 40, 40])
    labels = np.array([1, 0, 1, 0, 1, 0, 1, 0])
    scores = np.array([0.9, 0.1, 0.8, 0.2, 0.3, 0.7, 0.6, 0.4])
    assert list(length_bins(lengths)) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert length_controlled_auroc(scores, labels, lengths) == pytest.approx(0.75)
    by_hand = np.mean([roc_auc_score(labels[b * 2 : b * 2 + 2], scores[b * 2 : b * 2 + 2])
                       for b in range(4)])
    assert length_controlled_auroc(scores, labels, lengths) == pytest.approx(by_hand)
    # step length itself: perfect overall when shorter = correct, but says nothing within a bin
    lengths2 = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    labels2 = np.array([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
    assert auroc(-lengths2, labels2) == 1.0
    # quartiles [1-3] [4-6] [7-9] [10-12] each hold one class only: no within-bin AUROC
    assert length_controlled_auroc(-lengths2, labels2, lengths2) is None


GOOD = {"id": "gsm8k-1", "source": "processbench/gsm8k", "problem": "1+1?",
        "steps": ["1+1=2.", "So 2."], "labels": [1, 0], "problem_ref": "gsm8k_test:1"}


@pytest.mark.parametrize(("change", "needle"), [
    ({"steps": None}, "field 'steps' must be a list"),
    ({"labels": [1]}, "field 'labels' has 1 entries but 'steps' has 2"),
    ({"labels": [1, 2]}, "field 'labels'[1] must be 1, 0 or null"),
    ({"steps": ["a", 3]}, "field 'steps'[1] must be a str"),
    ({"problem": 5}, "field 'problem' must be a str"),
])
def test_bad_line_names_line_and_field(tmp_path: Path, change: dict[str, Any], needle: str) -> None:
    bad = {**GOOD, **change}
    path = tmp_path / "steps.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(LabelledDataError, match=r"steps\.jsonl:2: ") as err:
        load_labelled(path)
    assert needle in str(err.value)


def test_missing_field_and_bad_json(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({k: v for k, v in GOOD.items() if k != "labels"}) + "\n")
    with pytest.raises(LabelledDataError, match="s.jsonl:1: missing field 'labels'"):
        load_labelled(path)
    path.write_text(json.dumps(GOOD) + "\n\n{not json\n")
    with pytest.raises(LabelledDataError, match="s.jsonl:3: not valid JSON"):
        load_labelled(path)
    path.write_text(json.dumps(GOOD) + "\n")
    [sol] = load_labelled(path)
    assert (sol.dataset, sol.labels, sol.problem_ref) == ("gsm8k", (1, 0), "gsm8k_test:1")


def _propose_steps(handle: ModelHandle, prompt: list[int], n_steps: int, layers: frozenset[int],
                   pool: tuple[int, ...]) -> list[Any]:
    """What the engine's draft does: propose a step (k=1), keep it, propose the next."""
    state = handle.new_state()
    handle.extend(state, prompt)
    spec = SampleSpec(1, 0.7, 0.9, 12, StepRules(), layers, 0.01, pool_layers=pool)
    gen = torch.Generator().manual_seed(3)
    cands = []
    for _ in range(n_steps):
        proposal = propose(handle, state, spec, gen)
        [cand] = proposal.candidates
        proposal.keep(0)
        cands.append(cand)
        if cand.end == "eos":
            break
    return cands


def test_teacher_forced_features_equal_the_proposers(tiny_pair: tuple[Any, ...]) -> None:
    draft = ModelHandle(tiny_pair[0], tiny_pair[1])
    prompt = prompt_token_ids(draft, "What is 2 + 3?")
    layers = capture.last_layers(draft.model, 3)
    pool = (0, 2, 3)
    cands = _propose_steps(draft, prompt, 4, layers, pool)
    per_step = [c.token_ids[: c.n_fed] for c in cands]
    feats = teacher_force_ids(draft, prompt, per_step, [1] * len(per_step), pool)
    names = scalar_names(3)
    cfg = SpecGuardConfig()
    for i, cand in enumerate(cands):
        engine = draft_scores(cand, cfg)
        row = dict(zip(names, feats.scalars[i], strict=True))
        assert row["confidence"] == pytest.approx(
            min(cand.logprobs[: cand.n_fed]), abs=1e-4)
        if cand.n_fed == len(cand.token_ids):  # no unfed EOS: the engine's l is over the same tokens
            assert row["confidence"] == pytest.approx(engine.confidence, abs=1e-4)
            assert row["mean_logprob"] == pytest.approx(engine.mean_logprob, abs=1e-4)
        assert engine.grounding is not None
        assert row["grounding"] == pytest.approx(engine.grounding, abs=1e-4)
        assert row["n_tokens"] == engine.n_tokens == cand.n_fed
        for layer in pool:
            torch.testing.assert_close(torch.from_numpy(feats.pooled_mean[layer][i]),
                                       cand.pooled[layer], atol=1e-4, rtol=1e-4)


def _random_card(model: Any, tokenizer: Any, layers: tuple[int, ...], seed: int = 0
                 ) -> VerifierCard:
    fp = Fingerprint.model_validate(fingerprint(model, tokenizer))
    feats = [f"hidden:{layer}" for layer in layers] + ["confidence", "n_tokens"]
    width = len(layers) * fp.hidden_size + 2
    g = torch.Generator().manual_seed(seed)
    return VerifierCard(model=fp, features=feats, mean=torch.randn(width, generator=g).tolist(),
                        scale=(torch.rand(width, generator=g) + 0.5).tolist(),
                        weights=(torch.randn(width, generator=g) * 0.3).tolist(), bias=0.1)


def test_engine_scores_steps_with_a_card_as_teacher_forcing_does(
        tiny_pair: tuple[Any, ...], tmp_path: Path) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    card = _random_card(d_model, d_tok, (1, 3))
    path = tmp_path / "card.json"
    card.save(path)
    engine = SpecGuardEngine(d_model, d_tok, t_model, t_tok)
    from specguard_bench.reasoning.problems import messages_for

    result = engine.generate(messages_for("What is 2 + 3?"), verifier=str(path), route="score", tau=-math.inf,
                             k=1, max_steps=3, max_step_tokens=10, max_new_tokens=30)
    draft = engine.draft
    prompt = prompt_token_ids(draft, "What is 2 + 3?")
    steps = [s for s in result.steps if s.source == "draft"]
    assert steps and all(0.0 < (s.score or -1) < 1.0 for s in steps)
    per_step = [[t for t in s.token_ids if t not in draft.eos_ids] for s in steps]
    feats = teacher_force_ids(draft, prompt, per_step, [1] * len(per_step), (1, 3))
    names = scalar_names(3)
    probe = load_probe(path)
    for i, step in enumerate(steps):
        row = dict(zip(names, feats.scalars[i].tolist(), strict=True))
        pooled = {layer: torch.from_numpy(feats.pooled_mean[layer][i]) for layer in (1, 3)}
        if step.token_ids[-1] in draft.eos_ids:  # the engine's l also covers the EOS token
            row["confidence"] = float(step.confidence or 0.0)
        assert step.score == pytest.approx(probe.score(pooled, row), abs=1e-3)


def _labelled_file(path: Path, n: int = 12) -> Path:
    rows = []
    for i in range(n):
        labels: list[int | None] = [1, 1, 0, None] if i % 2 else [1, 1, 1, 1]
        rows.append({"id": f"gsm8k-{i}" if i < 6 else f"math-{i}",
                     "source": "processbench/gsm8k" if i < 6 else "processbench/math",
                     "problem": f"What is {i} + {i}?", "problem_ref": f"p{i // 2}",
                     "steps": [f"We add {i} and {i}.", f"That is {2 * i}.", "Check: ok.",
                               f"The answer is \\boxed{{{2 * i}}}."], "labels": labels})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cli_eval_and_train_on_a_tiny_model(pair_dirs: tuple[Path, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from specguard.cli import main

    data = _labelled_file(tmp_path / "steps.jsonl")
    out = tmp_path / "eval"
    common = ["--data", str(data), "--model", str(pair_dirs[0]), "--dtype", "float32",
              "--no-progress"]
    assert main(["verifier-eval", *common, "--out", str(out)]) == 0
    summary = json.loads((out / "verifier-eval.json").read_text())
    assert summary["n_steps"] == 42 and summary["n_solutions"] == 12
    # the file by name and content digest, never the machine's path to it
    assert re.fullmatch(r"steps\.jsonl@sha256:[0-9a-f]{16}", summary["data"])
    assert str(tmp_path) not in (out / "verifier-eval.md").read_text()
    r = summary["scorers"]["paper r"]
    assert r["default"] is True and (r["n_correct"], r["n_wrong"]) == (36, 6)
    assert set(r["by_source"]) == {"gsm8k", "math"}
    assert not any(e["default"] for n, e in summary["scorers"].items() if n != "paper r")
    assert (out / "verifier-eval.md").read_text().count("\n|") > 10
    assert (out / "verifier-eval-roc.png").stat().st_size > 1000
    chunks = sorted(p.name for p in out.glob("chunk-*.npz"))
    assert chunks == ["chunk-00000-12.npz"]
    card_path = tmp_path / "card.json"
    assert main(["verifier-train", *common, "--features", str(out), "--out", str(card_path)]) == 0
    card = VerifierCard.load(card_path)
    assert card.cv["folds"] == 5 and card.training["n_steps"] == 42
    assert card.training["data"] == summary["data"] and str(tmp_path) not in card_path.read_text()
    assert (out / "verifier-train.md").exists() and (out / "verifier-probe.json").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(data.read_text().replace('"labels": [1, 1, 1, 1]', '"labels": [1, 1]', 1))
    capsys.readouterr()
    assert main(["verifier-eval", "--data", str(bad), "--model", str(pair_dirs[0])]) == 2
    assert "bad.jsonl:1: field 'labels' has 2 entries but 'steps' has 4" in capsys.readouterr().err
