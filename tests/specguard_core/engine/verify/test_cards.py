"""Verifier cards: fingerprint checks, validation, and the engine refusing a card for another model."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from specguard_core import verifiers
from specguard_core.config import SpecGuardConfig
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.engine.verify.cards import (
    CardError,
    Fingerprint,
    Probe,
    VerifierCard,
    fingerprint,
    load_probe,
    shipped_card,
)
from specguard_core.engine.verify.verifier import Scores, step_score


def card_for(model: Any, tokenizer: Any, layers: tuple[int, ...] = (1,),
             scalars: tuple[str, ...] = ("confidence",)) -> VerifierCard:
    fp = Fingerprint.model_validate(fingerprint(model, tokenizer))
    width = len(layers) * fp.hidden_size + len(scalars)
    return VerifierCard(model=fp, features=[f"hidden:{i}" for i in layers] + list(scalars),
                        mean=[0.0] * width, scale=[1.0] * width, weights=[0.01] * width, bias=0.0)


def test_fingerprint_tells_models_apart(tiny_pair: tuple[Any, ...]) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    assert fingerprint(d_model, d_tok) == fingerprint(d_model, d_tok)
    a = Fingerprint.model_validate(fingerprint(d_model, d_tok))
    b = Fingerprint.model_validate(fingerprint(t_model, t_tok))
    assert set(a.mismatch(b)) >= {"config_sha256", "hidden_size", "num_layers"}


def test_card_for_another_model_is_refused(tiny_pair: tuple[Any, ...], tmp_path: Path) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    path = tmp_path / "target-card.json"
    card_for(t_model, t_tok).save(path)
    with pytest.raises(CardError, match="trained on .* but the scoring model is .*verifier-train"):
        VerifierCard.load(path).check_model(d_model, d_tok, path)
    engine = SpecGuardEngine(d_model, d_tok, t_model, t_tok)
    with pytest.raises(CardError, match="hidden_size"):
        engine.generate("2 + 3?", verifier=str(path), max_new_tokens=4)
    # the same card is fine when the target scores the steps
    engine.generate("2 + 3?", verifier=str(path), experimental={"scoring_model": "target"}, max_new_tokens=4,
                    route="score", tau=-math.inf)


def test_bad_cards_are_clear_errors(tiny_pair: tuple[Any, ...], tmp_path: Path) -> None:
    card = card_for(tiny_pair[0], tiny_pair[1])
    with pytest.raises(CardError, match="not found"):
        load_probe(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text(card.model_dump_json().replace('"bias":0.0', '"bias":"x"'))
    with pytest.raises(CardError, match="not a valid verifier card"):
        VerifierCard.load(bad)
    with pytest.raises(ValueError, match="weights has"):
        VerifierCard.model_validate({**card.model_dump(), "weights": [0.0], "mean": [0.0],
                                     "scale": [1.0]})
    with pytest.raises(ValueError, match="pooling 'last' is not available"):
        VerifierCard.model_validate({**card.model_dump(), "pooling": "last"})


def test_probe_score_is_a_probability_and_paper_is_unchanged(tiny_pair: tuple[Any, ...],
                                                           tmp_path: Path) -> None:
    card = card_for(tiny_pair[0], tiny_pair[1])
    path = tmp_path / "card.json"
    card.save(path)
    d = card.model.hidden_size
    scores = Scores(-1.0, 0.95, {1: torch.ones(d)}, -0.5, 7)
    z = 0.01 * (d * 1.0 - 1.0)
    assert step_score(scores, SpecGuardConfig(verifier=str(path))) == pytest.approx(
        1 / (1 + math.exp(-z)))
    assert SpecGuardConfig().verifier == "auto"  # the shipped card where one matches, else paper
    cfg = SpecGuardConfig(verifier="paper")
    assert step_score(scores, cfg) == pytest.approx(0.3 * (1 - 1 / 8) + 0.7 * 0.95)
    with pytest.raises(CardError, match="hidden layer 1 but it was not pooled"):
        Probe(card).score({}, {"confidence": 0.0})
    with pytest.raises(CardError, match="scalar feature 'confidence'"):
        Probe(card).score({1: torch.ones(d)}, {})


REAL = Path.home() / ".cache" / "specguard" / "models" / "hf"
REAL_DRAFT, REAL_TARGET = (REAL / "qwen2.5-coder-0.5b-instruct-bfloat16",
                           REAL / "qwen2.5-coder-1.5b-instruct-bfloat16")
SHIPPED = verifiers.SHIPPED_DIR / "qwen2.5-coder-0.5b-instruct.json"


@pytest.mark.real
@pytest.mark.skipif(not (os.environ.get("SPECGUARD_REAL_MODELS") == "1" and REAL_DRAFT.is_dir()
                         and REAL_TARGET.is_dir()),
                    reason="opt-in real-model test: set SPECGUARD_REAL_MODELS=1 (needs the default "
                    "pair in ~/.cache/specguard/models/hf)")
def test_shipped_card_runs_on_the_default_pair() -> None:
    engine = SpecGuardEngine.from_pretrained(str(REAL_DRAFT), str(REAL_TARGET), device="cpu",
                                             dtype="bfloat16", progress=False)
    result = engine.generate("What is 12 * 7?", verifier=str(SHIPPED), k=1, temperature=0.0,
                             route="score", tau=-math.inf, max_new_tokens=48, max_steps=3)
    scores = [s.score for s in result.steps if s.score is not None]
    assert scores and all(0.0 < s < 1.0 for s in scores)
    with pytest.raises(CardError, match="trained on qwen2.5-coder-0.5b"):
        engine.generate("What is 12 * 7?", verifier=str(SHIPPED), experimental={"scoring_model": "target"},
                        max_new_tokens=8)


def test_auto_verifier_uses_the_card_shipped_for_the_draft(tiny_pair: tuple[Any, ...],
                                                           tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    monkeypatch.setattr(verifiers, "SHIPPED_DIR", tmp_path)
    target_card = tmp_path / "a-target.json"
    card_for(t_model, t_tok).save(target_card)
    assert shipped_card(d_model, d_tok) is None  # only a card for another model is shipped
    engine = SpecGuardEngine(d_model, d_tok, t_model, t_tok)
    paper = engine.generate("2 + 3?", verifier="auto", max_new_tokens=4, route="score", tau=-math.inf)
    assert paper.verifier == "paper" and paper.trace()["verifier"] == "paper"
    # with experimental={"scoring_model": "target"} the target's card is the one that matches
    scored = engine.generate("2 + 3?", verifier="auto", experimental={"scoring_model": "target"},
                             max_new_tokens=4, route="score", tau=-math.inf)
    assert scored.verifier == str(target_card)

    draft_card = tmp_path / "b-draft.json"
    card_for(d_model, d_tok).save(draft_card)
    assert shipped_card(d_model, d_tok) == draft_card
    engine = SpecGuardEngine(d_model, d_tok, t_model, t_tok)  # resolved once per engine and model
    result = engine.generate("2 + 3?", verifier="auto", max_new_tokens=4, route="score", tau=-math.inf)
    assert result.verifier == str(draft_card)
    explicit = engine.generate("2 + 3?", verifier=str(draft_card), max_new_tokens=4,
                               route="score", tau=-math.inf)
    assert [s.score for s in result.steps] == [s.score for s in explicit.steps]
    scores = [s.score for s in result.steps if s.score is not None]
    assert scores and all(0.0 < s < 1.0 for s in scores)


def test_the_shipped_cards_are_valid_and_attention_free() -> None:
    cards = sorted(verifiers.SHIPPED_DIR.glob("*.json"))
    assert cards, "the package ships at least the default draft's card"
    for path in cards:
        card = VerifierCard.load(path)
        assert "grounding" not in card.features  # usable with beta = 1 (no attention capture)
        assert card.threshold is not None and card.cv["auroc_length_controlled"] > 0.7


def test_attention_is_captured_only_for_a_verifier_that_reads_grounding(
        tiny_pair: tuple[Any, ...], tmp_path: Path) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    path = tmp_path / "card.json"
    card_for(d_model, d_tok).save(path)  # hidden:1 + confidence: no grounding
    engine = SpecGuardEngine(d_model, d_tok, t_model, t_tok)
    run = dict(beta=0.3, route="score", tau=-math.inf, max_new_tokens=8)
    carded = engine.generate("2 + 3?", verifier=str(path), **run)
    assert carded.steps and all(s.grounding is None for s in carded.steps)
    paper = engine.generate("2 + 3?", verifier="paper", **run)
    assert all(s.grounding is not None for s in paper.steps)
    assert carded.raw_text == paper.raw_text  # capture never changes what is generated


def test_auto_says_so_when_a_card_for_a_lookalike_model_ships(
        tiny_pair: tuple[Any, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d_model, d_tok, t_model, t_tok = tiny_pair
    monkeypatch.setattr(verifiers, "SHIPPED_DIR", tmp_path)
    card = card_for(d_model, d_tok)
    lookalike = card.model_copy(update={"model": card.model.model_copy(
        update={"config_sha256": "0" * 64})})
    lookalike.save(tmp_path / "lookalike.json")
    engine = SpecGuardEngine(d_model, d_tok, t_model, t_tok)
    with pytest.warns(UserWarning, match="same shape .* another config"):
        result = engine.generate("2 + 3?", max_new_tokens=4, route="score", tau=-math.inf)
    assert result.verifier == "paper"


def test_a_registered_verifier_is_one_class_and_one_call(tiny_pair: Any) -> None:
    from specguard_core import SpecGuardEngine
    from specguard_core.engine.verify import registry

    class Short:
        """Shorter steps are more often right: r = 1 / tokens."""

        def reads_grounding(self) -> bool:
            return False

        def hidden_layers(self, model: Any, tokenizer: Any) -> tuple[int, ...]:
            return ()

        def score(self, scores: registry.Scores, cfg: SpecGuardConfig) -> float:
            return 1.0 / max(1, scores.n_tokens or 1)

    registry.register("short", Short)
    engine = SpecGuardEngine(*tiny_pair, config=SpecGuardConfig(
        k=1, temperature=0.0, max_new_tokens=24, max_step_tokens=6, verifier="short", tau=0.0))
    result = engine.generate("What is 3 + 4?")
    assert [s.score for s in result.steps] == [1.0 / len(s.token_ids) for s in result.steps
                                                if s.score is not None]
    assert all(s.grounding is None for s in result.steps)  # no attention was captured for it
    with pytest.raises(ValueError, match="reserved"):
        registry.register("auto", Short)


@pytest.mark.parametrize("change", [
    {"bias": float("nan")}, {"bias": float("inf")}, {"features": ["hidden:999"]},
    {"features": ["surprise"]}, {"weights": [1e300]}, {"scale": [1e-300]}, {"mean": [-1e13]},
    {"bias": 1e200}, {"kind": "svm"}, {"version": 2}, {"threshold": 1.5},
    {"features": ["hidden:1", "hidden:1"], "mean": [0.0] * 2, "scale": [1.0] * 2,
     "weights": [1.0] * 2},
    {"model": {"name": "m", "config_sha256": "x", "vocab_size": 10, "hidden_size": 0,
               "num_layers": 2}, "features": ["confidence"]}])
def test_a_card_with_numbers_or_layers_it_cannot_use_is_refused(tmp_path: Path, change: Any) -> None:
    from specguard_core.engine.verify.cards import CardError, VerifierCard, load_probe

    card = {"model": {"name": "m", "config_sha256": "x", "vocab_size": 10, "hidden_size": 1,
                      "num_layers": 2},
            "features": ["hidden:1"], "mean": [0.0], "scale": [1.0], "weights": [1.0],
            "bias": 0.0}
    VerifierCard.model_validate(card)  # the card as such is fine
    path = tmp_path / "card.json"
    path.write_text(json.dumps({**card, **change}))
    with pytest.raises(CardError) as err:
        load_probe(path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("content", [b"\xff\xfe{}", b"", b"[1, 2]", None])
def test_an_unreadable_card_file_is_one_card_error(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "card.json"
    path.mkdir() if content is None else path.write_bytes(content)
    with pytest.raises(CardError, match=str(path)) as err:
        load_probe(path)
    assert "\n" not in str(err.value)


def test_a_bad_card_is_refused_when_the_request_opens(tiny_pair: tuple[Any, ...],
                                                      tmp_path: Path) -> None:
    """A card that could only fail while scoring (a scalar the engine does not compute, weights
    that overflow) is refused by `stream()` itself, before the stream is read."""
    engine = SpecGuardEngine(*tiny_pair)
    card = card_for(tiny_pair[0], tiny_pair[1]).model_dump()
    for change in ({"features": ["hidden:1", "surprise"]},
                   {"weights": [1e300, -1e300] + card["weights"][2:]}):
        path = tmp_path / "card.json"
        path.write_text(json.dumps({**card, **change}))
        os.utime(path, ns=(1, len(str(change))))  # another version of the file
        with pytest.raises(CardError, match="not a valid verifier card"):  # no step ran
            engine.stream("2 + 3?", verifier=str(path), max_new_tokens=4)
