"""A scripted engine whose chat template reads a template variable (Qwen3's `enable_thinking`):
with `enable_thinking` false the rendered prompt says so, and the script answers without a
`<think>` section; otherwise it thinks first."""

from __future__ import annotations

import tempfile
from pathlib import Path

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.testing import QWEN_STYLE_TEMPLATE, ScriptedLM, build_tokenizer

NO_THINKING = "(thinking off)"
THINKING_TEMPLATE = QWEN_STYLE_TEMPLATE.replace(
    "{% for message in messages %}",
    "{% if enable_thinking is defined and enable_thinking is false %}<|im_start|>system\n"
    + NO_THINKING + "<|im_end|>\n{% endif %}{% for message in messages %}", 1)
THOUGHT, PLAIN = "<think>\nLet me think.\n</think>\n\nThought it over.", "Straight answer."


def respond(prompt: str) -> str:
    return PLAIN if NO_THINKING in prompt else THOUGHT


def thinking_engine() -> SpecGuardEngine:
    tok = build_tokenizer(Path(tempfile.mkdtemp(prefix="specguard-think-")),
                          template=THINKING_TEMPLATE)
    cfg = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=64)
    return SpecGuardEngine(ScriptedLM(tok, respond, name="think-draft"), tok,
                           ScriptedLM(tok, respond, layers=4, name="think-target"), tok,
                           config=cfg, name="specguard-thinking")
