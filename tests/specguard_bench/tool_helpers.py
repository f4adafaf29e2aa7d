"""Scripted models for the tool-calling suites: `ScriptedGenerateLM`, a `ScriptedLM` with a greedy
`generate` (the baselines call `model.generate`), and scripted replies for BFCL tasks."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

from specguard_bench.tool_calling.bfcl_data import BfclTask
from specguard_core.config import SpecGuardConfig
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.testing import ScriptedLM, build_tokenizer


class ScriptedGenerateLM(ScriptedLM):
    """A `ScriptedLM` with a greedy `generate(ids, generation_config=..., assistant_model=...)`
    (as transformers' greedy and assisted greedy decoding give the target's own tokens);
    `assisted` counts the calls that came with an assistant model."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.assisted = 0

    def generate(self, input_ids: torch.Tensor, attention_mask: Any = None,
                 generation_config: Any = None, assistant_model: Any = None,
                 stop_strings: Sequence[str] = (), tokenizer: Any = None,
                 **kwargs: Any) -> torch.Tensor:
        """Greedy to EOS or `max_new_tokens`, or (as transformers' `stop_strings`) until the new
        text holds one of `stop_strings`."""
        self.assisted += assistant_model is not None
        eos = set(generation_config.eos_token_id)
        cache, ids, step = DynamicCache(), input_ids, input_ids
        for _ in range(generation_config.max_new_tokens):
            logits = self.forward(step, cache=cache).logits
            assert logits is not None
            token = int(logits[0, -1].argmax())
            step = torch.tensor([[token]])
            ids = torch.cat([ids, step], dim=1)
            new = tokenizer.decode(ids[0, input_ids.shape[1]:]) if stop_strings else ""
            if token in eos or any(stop in new for stop in stop_strings):
                break
        return ids


def hermes(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Hermes `<tool_call>` blocks for (name, arguments) pairs."""
    return "\n".join(f'<tool_call>\n{json.dumps({"name": n, "arguments": dict(a)})}\n</tool_call>'
                     for n, a in calls)


def first_allowed(value: Any) -> Any:
    """A value built from the first allowed value of each argument (nested dicts too)."""
    if isinstance(value, dict):
        return {k: first_allowed(v[0]) for k, v in value.items() if v and v[0] != ""}
    if isinstance(value, list):
        return [first_allowed(v) for v in value]
    return value


def right_calls(task: BfclTask) -> list[tuple[str, dict[str, Any]]]:
    """The expected calls of a task, each argument its first allowed value."""
    return [(name, {k: first_allowed(v[0]) for k, v in args.items() if v and v[0] != ""})
            for want in task.ground_truth or [] for name, args in want.items()]


def responder(replies: Mapping[str, str], default: str = "5") -> Callable[[str], str]:
    """A script that answers the prompt containing a key's question with that key's reply."""
    def reply(prompt: str) -> str:
        for question, text in replies.items():
            if question in prompt:
                return text
        return default
    return reply


def scripted_engine(folder: Path, target: Callable[[str], str],
                    draft: Callable[[str], str]) -> SpecGuardEngine:
    """An engine over two `ScriptedGenerateLM`s sharing a locally built tokenizer."""
    tok = build_tokenizer(folder)
    return SpecGuardEngine(ScriptedGenerateLM(tok, draft, name="scripted-draft"), tok,
                           ScriptedGenerateLM(tok, target, layers=4, name="scripted-target"),
                           tok, config=SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=256))
