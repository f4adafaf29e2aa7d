"""Where a step's text ends on its tokens (`text.step_text.StepText`), through the engine: bytes
of a character that the model ends the turn inside show as U+FFFD, as a plain decode shows them,
instead of vanishing from the text while their tokens stay in the step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specguard_core import SpecGuardConfig
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.testing import ScriptedLM, build_tokenizer


class TokenScript(ScriptedLM):
    """A scripted model that writes the token ids `script` after the assistant header, then EOS
    (ids, not text: the script may stop inside a character)."""

    def __init__(self, tokenizer: Any, script: list[int], **kwargs: Any) -> None:
        super().__init__(tokenizer, lambda prompt: "", **kwargs)
        self.script = script

    def _next_token(self, ids: list[int]) -> int:
        done = ids[self._reply_start(ids):]
        on_script = done == self.script[: len(done)]
        return self.script[len(done)] if on_script and len(done) < len(self.script) else self.eos


@pytest.mark.parametrize("fallback", ["speculative", "greedy"])
@pytest.mark.parametrize("route", ["score", "check"])
def test_a_character_cut_by_eos_shows_as_replacement(tmp_path: Path, fallback: str,
                                                     route: str) -> None:
    tok = build_tokenizer(tmp_path)
    emoji = tok("\U0001f642", add_special_tokens=False)["input_ids"]
    assert len(emoji) == 4  # four byte-level tokens
    script = tok("Hi ", add_special_tokens=False)["input_ids"] + emoji[:2]
    engine = SpecGuardEngine(TokenScript(tok, script), tok, TokenScript(tok, script, layers=4),
                             tok, config=SpecGuardConfig(k=1, temperature=0.0, beta=1.0,
                                                         fallback=fallback))
    result = engine.generate("Go", route=route, **({"tau": float("inf")} if route == "score"
                                                   else {}))
    assert result.finish_reason == "stop"
    assert result.raw_text == tok.decode(script) == "Hi \ufffd"
    assert [t for s in result.steps for t in s.token_ids][:-1] == script
