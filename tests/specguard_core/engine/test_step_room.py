"""A tool call longer than `max_step_tokens` is one step up to its closer, whoever writes it (the
draft, the speculative fallback, the target regenerating, a forced call); only `max_new_tokens`
or the context window cut it, and then the turn ends with `length`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import DynamicCache

from specguard_core import SpecGuardConfig
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.testing import ScriptedLM, build_tokenizer, scripted_engine
from tests.fixtures import WEATHER

CITY = "Paris " * 60  # the call is about 320 tokens
LONG = json.dumps({"name": "get_weather", "arguments": {"city": CITY}})
CALL = f"<tool_call>\n{LONG}\n</tool_call>"
OTHER = CALL.replace("Paris", "Rome")  # a draft whose call the target refuses


@pytest.mark.parametrize(("draft", "settings"), [
    (CALL, {}),  # the draft's call, checked by the target
    (CALL, {"route": "score", "tau": -math.inf}),  # scored: a call is checked all the same
    (OTHER, {"fallback": "speculative"}),
    (OTHER, {"fallback": "greedy"}),
    (OTHER, {"fallback": "speculative", "draft_lookahead": 4}),
])
@pytest.mark.parametrize("max_step_tokens", [8, 32])
def test_a_call_longer_than_the_step_budget_is_one_valid_call(
        draft: str, settings: dict[str, Any], max_step_tokens: int) -> None:
    engine = scripted_engine(lambda p: "Let me see.\n\n" + CALL, lambda p: "Let me see.\n\n" + draft)
    result = engine.generate("Weather?", tools=[WEATHER], max_step_tokens=max_step_tokens,
                             max_new_tokens=1000, **settings)
    assert [c.arguments for c in result.tool_calls] == [{"city": CITY}]
    assert result.invalid_tool_calls == [] and result.finish_reason == "tool_calls"
    call_step = next(s for s in result.steps if s.kind == "tool_call")
    assert call_step.text == CALL and len(call_step.token_ids) > max_step_tokens


def test_a_long_bare_call_and_a_forced_call_are_whole() -> None:
    bare = scripted_engine(lambda p: LONG)
    result = bare.generate("Weather?", tools=[WEATHER], max_step_tokens=16, max_new_tokens=1000)
    assert [c.arguments for c in result.tool_calls] == [{"city": CITY}]
    forced = scripted_engine(lambda p: CALL, lambda p: "I would rather chat.")
    result = forced.generate("Weather?", tools=[WEATHER], tool_choice="get_weather",
                             max_step_tokens=16, max_new_tokens=1000)
    assert [c.arguments for c in result.tool_calls] == [{"city": CITY}]
    assert result.finish_reason == "tool_calls"


def test_max_new_tokens_cuts_a_call_with_length() -> None:
    engine = scripted_engine(lambda p: CALL)
    result = engine.generate("Weather?", tools=[WEATHER], max_step_tokens=16, max_new_tokens=100)
    assert result.finish_reason == "length" and result.usage.completion_tokens == 100
    assert result.tool_calls == [] and len(result.invalid_tool_calls) == 1


def test_max_new_tokens_inside_a_character_of_a_call_is_length() -> None:
    """The budget ends inside a 4-byte character: the step drops the unfinished character's
    tokens, so fewer than max_new_tokens are written, and still the call was cut."""
    call = "<tool_call>\n" + json.dumps(
        {"name": "get_weather", "arguments": {"city": "Zurich \U0001f642\U0001f642"}},
        ensure_ascii=False) + "\n</tool_call>"
    engine = scripted_engine(lambda p: call)
    tok = engine.tokenizer
    before = len(tok(call[: call.index("\U0001f642")], add_special_tokens=False)["input_ids"])
    assert len(tok("\U0001f642", add_special_tokens=False)["input_ids"]) > 2  # byte tokens
    result = engine.generate("Weather?", tools=[WEATHER], max_step_tokens=8,
                             max_new_tokens=before + 2)
    assert result.usage.completion_tokens == before  # the partial character was dropped
    assert result.finish_reason == "length" and result.tool_calls == []


def test_the_context_window_cuts_a_call_with_length() -> None:
    engine = scripted_engine(lambda p: CALL)
    prompt = engine.generate("Weather?", tools=[WEATHER], max_new_tokens=1).usage.prompt_tokens
    engine.draft.context_window = engine.target.context_window = prompt + 60
    result = engine.generate("Weather?", tools=[WEATHER], max_step_tokens=16, max_new_tokens=1000)
    assert result.finish_reason == "length" and result.tool_calls == []
    assert prompt + result.usage.completion_tokens < prompt + 60


@pytest.mark.parametrize("windows", [(0, 32768), (32768, 0), (0, 0)])
def test_a_window_of_zero_is_no_window(windows: tuple[int, int]) -> None:
    engine = scripted_engine(lambda p: "Alpha one.\n\nBeta two.")
    engine.draft.context_window, engine.target.context_window = windows
    assert engine.context_window == max(windows)
    result = engine.generate("Go")
    assert result.raw_text == "Alpha one.\n\nBeta two." and result.finish_reason == "stop"


class LearnedPositions(ScriptedLM):
    """A scripted model with learned positions: feeding it past its window raises, as an
    embedding lookup past `max_position_embeddings` does."""

    def __init__(self, tokenizer: Any, responder: Any, window: int) -> None:
        super().__init__(tokenizer, responder)
        self.config.max_position_embeddings = window

    def forward(self, input_ids: torch.Tensor, cache: DynamicCache | None = None,
                **kwargs: Any) -> Any:
        seen = cache.get_seq_length() if cache is not None else 0
        if seen + input_ids.shape[1] > self.config.max_position_embeddings:
            raise IndexError("index out of range in self")
        return super().forward(input_ids, cache, **kwargs)


@pytest.mark.parametrize("fallback", ["speculative", "greedy"])
def test_prompt_lookup_guesses_never_pass_the_window(tmp_path: Path, fallback: str) -> None:
    """The draft's one-candidate proposals feed the tokens prompt lookup expects next: near the
    window those guesses stop at it, as in the fallback's draft runs."""
    words = " ".join(f"w{i}" for i in range(40))
    tok = build_tokenizer(tmp_path)
    prompt = tok.apply_chat_template([{"role": "user", "content": words}],
                                     add_generation_prompt=True, tokenize=False)
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    window = n_prompt + 24  # the reply repeats the prompt: long guesses at every token
    draft = LearnedPositions(tok, lambda p: words, window)
    target = LearnedPositions(tok, lambda p: words, window)
    engine = SpecGuardEngine(draft, tok, target, tok, config=SpecGuardConfig(
        k=1, temperature=0.0, beta=1.0, max_new_tokens=200, fallback=fallback))
    result = engine.generate(words, draft_lookahead=16)
    assert result.finish_reason == "length"
    assert words.startswith(result.raw_text) and result.usage.completion_tokens == 23
