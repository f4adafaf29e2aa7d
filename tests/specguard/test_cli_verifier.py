"""`specguard verifier-eval/-train`: which scorer the reports mark as the engine's default;
`specguard verifier-stamp`: a card gets the weight digest of the model it was fitted on."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from specguard.cli.verifier import _default_scorer
from specguard_core.engine.verify.cards import VerifierCard
from specguard_core.verifiers import SHIPPED_DIR


def test_the_default_is_the_shipped_card_for_its_model_else_paper_r(
        capsys: pytest.CaptureFixture[str]) -> None:
    card_path = sorted(SHIPPED_DIR.glob("*.json"))[0]
    shipped = VerifierCard.load(card_path).model.model_dump()
    assert _default_scorer(SimpleNamespace(meta={"fingerprint": shipped})) is None
    assert str(card_path) in capsys.readouterr().out
    other = {**shipped, "config_sha256": "0" * 64}
    assert _default_scorer(SimpleNamespace(meta={"fingerprint": other})) == "paper r"


def test_verifier_stamp_records_the_weight_digest_of_the_model_a_card_was_fitted_on(
        tiny_pair: Any, pair_dirs: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from specguard.cli import main
    from specguard_core.engine.verify.fingerprint import weights_digest
    from tests.specguard_core.engine.verify.test_cards import card_for

    card = card_for(tiny_pair[0], tiny_pair[1])  # the draft of pair_dirs, loaded in float32
    path = tmp_path / "card.json"
    card.model_copy(update={"model": card.model.model_copy(update={"weights_sha256": None})}
                    ).save(path)
    draft_dir, target_dir = pair_dirs
    argv = ["verifier-stamp", str(path), "--model", str(draft_dir), "--no-progress"]  # bfloat16
    assert main(argv) == 0
    stamped = VerifierCard.load(path)
    assert stamped.model.weights_sha256 == weights_digest(tiny_pair[0]) is not None
    assert "stamped with the weight digest" in capsys.readouterr().out
    assert main(argv) == 0 and "already has" in capsys.readouterr().out
    assert main(["verifier-stamp", str(path), "--model", str(target_dir), "--no-progress"]) == 2
    errors = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines()
              if line.startswith("error: ")]  # beside transformers' loading bar
    assert len(errors) == 1 and "differs in config_sha256" in errors[0]
    assert json.loads(path.read_text())["model"] == stamped.model.model_dump()  # left as it was
    assert main(["verifier-stamp", str(tmp_path / "nope.json"), "--model", "x"]) == 2
    assert "nope.json not found" in capsys.readouterr().err
