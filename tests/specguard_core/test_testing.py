"""The scripted stand-in models: they follow their script through the real engine."""

from __future__ import annotations

from specguard_core.testing import scripted_engine


def test_characters_spanning_several_tokens_are_written_whole() -> None:
    reply = "Café ☕ costs 3 €.\n\nIn Tōkyō: 東京.\n\nDone."
    result = scripted_engine(lambda prompt: reply).generate("Price?")
    assert result.text == reply and result.finish_reason == "stop"
    assert len(result.steps) == 3


def test_an_unconfident_draft_is_replaced_by_the_target_script() -> None:
    engine = scripted_engine(lambda p: "Naïve answer: 5 €.\n\nSo 5 €.",
                             lambda p: "Naïve guess: 6 €.\n\nSo 6 €.", draft_sharpness=0.5)
    result = engine.generate("What is 2 + 3?", tau=0.9)  # grounding is perfect: confidence decides
    assert result.text == "Naïve answer: 5 €.\n\nSo 5 €."
    assert [s.source for s in result.steps] == ["target", "target"]
