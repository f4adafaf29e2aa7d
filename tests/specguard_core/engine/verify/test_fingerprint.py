"""A card's fingerprint includes a digest of the weights: a fine-tune with its base model's config
is told apart (refused by name, skipped by `auto`), whatever dtype either was loaded in; and the
paper verifier's bounds shipped per model are used when a request keeps the default bounds."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from specguard_core import verifiers
from specguard_core.config import NormBounds
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.engine.verify.bounds import ShippedBounds, shipped_bounds_for
from specguard_core.engine.verify.cards import CardError, Fingerprint, VerifierCard, fingerprint
from specguard_core.engine.verify.fingerprint import weights_digest
from tests.specguard_core.engine.verify.test_cards import card_for

REPO = Path(__file__).resolve().parents[4]


def fine_tune(model: Any) -> Any:
    """A copy of `model` with one attention matrix nudged (as a merged LoRA adapter would)."""
    tuned = copy.deepcopy(model)
    with torch.no_grad():
        tuned.model.layers[1].self_attn.q_proj.weight.add_(0.02)
    return tuned


def test_the_digest_tells_a_fine_tune_apart_but_not_a_dtype(tiny_pair: tuple[Any, ...],
                                                            pair_dirs: tuple[Path, Path],
                                                            tmp_path: Path) -> None:
    d_model, d_tok = tiny_pair[0], tiny_pair[1]
    base = Fingerprint.model_validate(fingerprint(d_model, d_tok))
    tuned = Fingerprint.model_validate(fingerprint(fine_tune(d_model), d_tok))
    assert base.weights_sha256 and tuned.weights_sha256
    assert base.mismatch(tuned) == ["weights_sha256"]  # the config cannot tell them apart
    # float32 weights: the same digest loaded in float32 and bfloat16
    loads = {dtype: AutoModelForCausalLM.from_pretrained(pair_dirs[0], dtype=dtype)
             for dtype in (torch.float32, torch.bfloat16)}
    assert {weights_digest(m) for m in loads.values()} == {base.weights_sha256}
    # a bfloat16 checkpoint (as the shipped card's model): the same in every dtype
    loads[torch.bfloat16].save_pretrained(tmp_path / "bf16")
    digests = {weights_digest(AutoModelForCausalLM.from_pretrained(tmp_path / "bf16", dtype=dt))
               for dt in (torch.bfloat16, torch.float32, torch.float16)}
    assert digests == {base.weights_sha256}
    # a card written before digests existed matches on the rest of the fingerprint
    assert base.model_copy(update={"weights_sha256": None}).mismatch(tuned) == []


def test_a_card_for_the_base_model_is_refused_for_its_fine_tune(
        tiny_pair: tuple[Any, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    monkeypatch.setattr(verifiers, "SHIPPED_DIR", tmp_path)
    card = tmp_path / "base.json"
    card_for(d_model, d_tok).save(card)
    assert VerifierCard.load(card).model.weights_sha256 == weights_digest(d_model)
    engine = SpecGuardEngine(fine_tune(d_model), d_tok, t_model, t_tok)
    run: dict[str, Any] = dict(max_new_tokens=4, route="score", tau=-math.inf)
    with pytest.warns(UserWarning, match="its config but other weights .*paper's ensemble"):
        auto = engine.generate("2 + 3?", **run)
    assert auto.verifier == "paper"
    with pytest.raises(CardError, match=r"^verifier card .*base\.json was trained on .*other "
                       r"weights \(a fine-tune\?\); train a card .*verifier='paper'$"):
        engine.generate("2 + 3?", verifier=str(card), **run)
    # the base model itself still gets its card
    assert SpecGuardEngine(d_model, d_tok, t_model, t_tok).generate(
        "2 + 3?", **run).verifier == str(card)
    # a card without a digest is matched on its config alone
    unstamped = VerifierCard.load(card)
    unstamped.model_copy(update={"model": unstamped.model.model_copy(
        update={"weights_sha256": None})}).save(card)
    assert SpecGuardEngine(fine_tune(d_model), d_tok, t_model, t_tok).generate(
        "2 + 3?", **run).verifier == str(card)


def test_the_shipped_bounds_are_the_benchmarks_and_keyed_like_the_shipped_card() -> None:
    card = VerifierCard.load(verifiers.SHIPPED_DIR / "qwen2.5-coder-0.5b-instruct.json")
    assert shipped_bounds_for(card.model) == NormBounds.load(
        REPO / "benchmarks" / "bounds-qwen2.5-coder-0.5b.json")
    files = sorted((verifiers.SHIPPED_DIR / "bounds").glob("*.json"))
    assert len(files) == 2
    target = [ShippedBounds.load(f) for f in files if "1.5b" in f.name][0]
    assert target.bounds == NormBounds.load(
        REPO / "benchmarks" / "bounds-qwen2.5-coder-1.5b-target-scored.json")
    assert (target.model.hidden_size, target.model.num_layers) == (1536, 28)
    assert shipped_bounds_for(card.model.model_copy(update={"config_sha256": "0" * 64})) is None


def test_default_bounds_become_the_ones_shipped_for_the_scoring_model(
        tiny_pair: tuple[Any, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    monkeypatch.setattr(verifiers, "SHIPPED_DIR", tmp_path)
    (tmp_path / "bounds").mkdir()
    fitted = NormBounds(confidence_min=-3.0, confidence_max=-1.0, grounding_min=0.5,
                        grounding_max=0.6)
    (tmp_path / "bounds" / "draft.json").write_text(json.dumps(
        {"model": fingerprint(d_model, d_tok), "bounds": fitted.model_dump()}))
    run: dict[str, Any] = dict(verifier="paper", max_new_tokens=12, route="score", tau=-math.inf, k=1,
                               temperature=0.0)

    def scores(**extra: Any) -> list[float | None]:
        engine = SpecGuardEngine(d_model, d_tok, t_model, t_tok)
        return [s.score for s in engine.generate("2 + 3?", **run, **extra).steps]

    shipped = scores()
    assert shipped == scores(bounds=fitted)
    explicit = NormBounds(confidence_min=-20.0, confidence_max=0.0)
    assert scores(bounds=explicit) != shipped  # bounds a request sets win
    # bounds belong to the scoring model: the target, with none shipped, keeps the defaults
    by_target = {"scoring_model": "target"}
    assert scores(experimental=by_target) != scores(experimental=by_target, bounds=fitted)
