"""Scripted GSM8K answers for the bench tests: a target that solves problem 0 (Janet's ducks, 18)
and writes other numbers elsewhere, with a reply length that depends on the prompt, and a draft
that gets its second step wrong (so the target's check fails there and the fallback runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specguard_core.config import SpecGuardConfig
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.testing import ScriptedLM, build_tokenizer


def target_reply(prompt: str) -> str:
    words = len(prompt.split())
    answer = 18 if "Janet" in prompt else words
    steps = "".join(f"Step {i}: keep going.\n\n" for i in range(words % 3))
    return f"Read the question.\n\nIt has {words} words.\n\n{steps}The answer is \\boxed{{{answer}}}."


def draft_reply(prompt: str) -> str:
    return target_reply(prompt).replace(" words.", " words, maybe.")


def scripted_pair(folder: Path) -> dict[str, Any]:
    """{"tok", "draft", "target"}: the scripted models over one locally built tokenizer."""
    tok = build_tokenizer(folder)
    return {"tok": tok, "draft": ScriptedLM(tok, draft_reply, name="scripted-draft"),
            "target": ScriptedLM(tok, target_reply, layers=4, name="scripted-target")}


def local_engine(pair: dict[str, Any]) -> SpecGuardEngine:
    """The in-process engine over the scripted pair (greedy defaults, as the presets override)."""
    return SpecGuardEngine(pair["draft"], pair["tok"], pair["target"], pair["tok"],
                           config=SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=256))
