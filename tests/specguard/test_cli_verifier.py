"""`specguard verifier-eval/-train`: which scorer the reports mark as the engine's default."""

from __future__ import annotations

from types import SimpleNamespace

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
