"""The pure OpenAI <-> engine translation: request config, messages, and stream deltas whose
concatenation equals the final response."""

from __future__ import annotations

import math
from typing import Any

import pytest

from specguard.serve.api import chunks, convert
from specguard.serve.api.protocol import ChatCompletionRequest, ChatMessage
from specguard_core.config import SpecGuardConfig
from specguard_core.text import formats
from specguard_core.text.chat import InputError
from specguard_core.types import StepRecord, ToolCall


def step(text: str, kind: Any = "answer", call: ToolCall | None = None) -> StepRecord:
    return StepRecord(index=0, text=text, token_ids=[1], source="draft", kind=kind,
                      confidence=-math.inf, grounding=None, score=0.5, accepted=True,
                      n_candidates=1, latency_s=0.0, tool_call=call)


def test_request_config_maps_openai_fields_then_the_extension() -> None:
    req = ChatCompletionRequest.model_validate({
        "model": "m", "messages": [{"role": "user", "content": "q"}], "temperature": 0,
        "top_p": 0.5, "max_tokens": 9, "max_completion_tokens": 7, "stop": "END", "seed": 3,
        "specguard": {"k": 2, "tau": "-inf"}})
    cfg = convert.request_config(SpecGuardConfig(), req)
    assert (cfg.temperature, cfg.top_p, cfg.max_new_tokens, cfg.stop, cfg.seed, cfg.k, cfg.tau) \
        == (0.0, 0.5, 7, ("END",), 3, 2, -math.inf)
    bare = ChatCompletionRequest.model_validate({"model": "m", "messages": []})
    assert convert.request_config(SpecGuardConfig(k=5), bare) == SpecGuardConfig(k=5)


def test_messages_text_parts_and_tool_calls() -> None:
    msgs = [ChatMessage(role="user", content=[{"type": "text", "text": "a"},
                                              {"type": "text", "text": "b"}]),
            ChatMessage(role="assistant", content=None, tool_calls=[{"id": "c"}])]
    assert convert.engine_messages(msgs) == [
        {"role": "user", "content": "a\nb"},  # joined as the engine joins them (and vLLM)
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}]
    assert convert.engine_messages([ChatMessage(role="developer", content="Be brief.")]) == \
        [{"role": "system", "content": "Be brief."}]
    from specguard_core.text.chat import normalise_messages

    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert normalise_messages(parts)[0]["content"] == convert.engine_messages(msgs)[0]["content"]
    with pytest.raises(InputError, match="text only"):
        convert.engine_messages([ChatMessage(role="user", content=[{"type": "input_audio"}])])


def test_instruction_joins_the_system_message() -> None:
    out = formats.with_instruction([{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "q"}], "JSON only.")
    assert out[0] == {"role": "system", "content": "Be brief.\n\nJSON only."} and len(out) == 2
    assert formats.with_instruction([{"role": "user", "content": "q"}], "X")[0]["role"] == "system"
    assert formats.format_instruction({"type": "text"}) is None


def test_deltas_concatenate_to_the_stripped_answer() -> None:
    deltas = chunks.StepDeltas(stops=())
    texts = ["\n\nHello there.\n\n", "<think>hmm</think>", "Bye.\n\n", "  \n\n"]
    kinds = ["answer", "reasoning", "answer", "answer"]
    out = [deltas.delta(step(t, k)) for t, k in zip(texts, kinds, strict=True)]
    assert out[0] == {"content": "Hello there."}
    assert out[1] == {"reasoning": "hmm", "reasoning_content": "hmm"}  # vLLM: new, old name
    assert out[2] == {"content": "\n\nBye."} and out[3] == {}
    assert deltas.flush("Hello there.\n\nBye.") == {}
    content = "".join(d.get("content", "") for d in out)
    assert content == "".join(t for t, k in zip(texts, kinds, strict=True) if k == "answer").strip()


def test_deltas_hold_back_a_possible_stop_string_across_steps() -> None:
    deltas = chunks.StepDeltas(stops=("ST", ""))
    assert deltas.delta(step("one S")) == {"content": "one"}  # "S" may start "ST"
    assert deltas.delta(step("Tay two")) == {"content": " "}  # it did: the space before it
    assert deltas.flush("one ") == {}
    other = chunks.StepDeltas(stops=("ST",))
    assert other.delta(step("one S")) == {"content": "one"}
    assert other.delta(step("ome more S")) == {"content": " Some more"}
    assert other.flush("one Some more S") == {"content": " S"}  # the run ended: S was text


def test_tool_call_deltas_number_valid_calls_only() -> None:
    deltas = chunks.StepDeltas(stops=())
    bad = ToolCall("call_x", "nope", {}, raw="{}", error="unknown tool")
    good = ToolCall("call_1", "f", {"a": 1})
    assert deltas.delta(step("<tool_call>..", "tool_call", bad)) == {}
    assert deltas.delta(step("<tool_call>..", "tool_call", good)) == {"tool_calls": [{
        "index": 0, "id": "call_1", "type": "function",
        "function": {"name": "f", "arguments": '{"a": 1}'}}]}


def test_traces_are_json_safe_and_finish_reasons_openai() -> None:
    assert convert.step_trace(step("x"))["confidence"] is None  # -inf has no JSON form
    assert convert.json_safe({"a": [math.nan, 1.5, (math.inf,)]}) == {"a": [None, 1.5, [None]]}
    assert [convert.openai_finish(r) for r in ("stop", "length", "tool_calls", "max_steps")] == \
        ["stop", "length", "tool_calls", "length"]
