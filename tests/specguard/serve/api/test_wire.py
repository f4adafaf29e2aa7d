"""Responses and stream chunks as OpenAI's own types: the JSON sent is the format the server has
always sent (keys, values, null vs absent), and a key OpenAI's type does not know, other than the
allowed extensions, or a value of the wrong type, fails here rather than in a client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import ValidationError

from specguard.serve.api import chunks, completions, convert, wire
from specguard.serve.app import create_app
from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.testing import scripted_engine
from specguard_core.types import GenerationResult
from tests.specguard.serve.serve_helpers import WEATHER, live_server, reply, sse_events

THINK = "<think>\nLet me think.\n</think>"
Q = [{"role": "user", "content": "What is (3 + 4) * 6?"}]


def responder(prompt: str) -> str:
    return THINK if "Think only" in prompt else reply(prompt)


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return scripted_engine(responder)


@pytest.fixture(autouse=True)
def frozen_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(convert.time, "time", lambda: 7.5)
    yield


def sent(model: wire.Response) -> dict[str, Any]:
    """What goes on the wire, checked as the `openai` SDK reads it (`model_construct`: unvalidated,
    unknown keys kept in `model_extra`): no key outside OpenAI's type but the allowed extensions."""
    out = wire.dump(model)
    assert wire.unknown_keys(type(model).model_construct(**out)) == []
    return out


def usage_of(r: GenerationResult, **extra: Any) -> dict[str, Any]:
    return {"prompt_tokens": r.usage.prompt_tokens, "completion_tokens": r.usage.completion_tokens,
            "total_tokens": r.usage.total_tokens, **extra}


def test_chat_responses_keep_their_wire_format(engine: SpecGuardEngine) -> None:
    plain = engine.generate(Q)
    assert sent(convert.chat_response(plain, "chatcmpl-1", "m")) == {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": plain.text,
                                             "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": usage_of(plain), "specguard": convert.run_trace(plain)}
    tools = engine.generate([{"role": "user", "content": "Weather?"}], tools=[WEATHER])
    call = tools.tool_calls[0]
    message = sent(convert.chat_response(tools, "chatcmpl-2", "m"))["choices"][0]["message"]
    assert message == {"role": "assistant", "content": None, "refusal": None, "tool_calls": [
        {"id": call.id, "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
    thought = engine.generate([{"role": "user", "content": "Think only"}])
    body = sent(convert.chat_response(thought, "chatcmpl-3", "m"))
    assert body["choices"][0]["message"] == {
        "role": "assistant", "content": "", "refusal": None,
        "reasoning": "Let me think.", "reasoning_content": "Let me think."}
    assert body["usage"] == usage_of(thought, completion_tokens_details={
        "reasoning_tokens": len(thought.steps[0].token_ids)})
    entries = [{"token": "The", "logprob": -0.5, "bytes": [84, 104, 101], "top_logprobs": []}]
    body = sent(convert.chat_response(plain, "chatcmpl-4", "m", logprobs=entries))
    assert body["choices"][0]["logprobs"] == {"content": entries, "refusal": None}


def test_completions_and_n_choices_keep_their_wire_format(engine: SpecGuardEngine) -> None:
    a, b = engine.generate(Q), engine.generate(Q)
    shape, decode = completions.Shape(), engine.token_text
    one = completions.response([a], ["Q"], 1, "cmpl-1", "m", shape, decode)
    assert sent(one) == {
        "id": "cmpl-1", "object": "text_completion", "created": 7, "model": "m",
        "choices": [{"index": 0, "text": a.raw_text, "logprobs": None, "finish_reason": "stop"}],
        "usage": usage_of(a), "specguard": convert.run_trace(a)}
    both = sent(completions.response([a, b], ["Q"], 2, "cmpl-1", "m", shape, decode))
    assert [c["index"] for c in both["choices"]] == [0, 1] and both["id"] == "cmpl-1"
    assert both["usage"] == {"prompt_tokens": a.usage.prompt_tokens,
                             "completion_tokens": a.usage.completion_tokens * 2,
                             "total_tokens": a.usage.total_tokens + a.usage.completion_tokens}
    assert both["specguard"] == {"choices": [convert.run_trace(a), convert.run_trace(b)]}
    two_prompts = sent(completions.response([a, b], ["Q", "R"], 1, "cmpl-1", "m", shape, decode))
    assert two_prompts["usage"]["prompt_tokens"] == 2 * a.usage.prompt_tokens  # each counted
    echoed = sent(completions.response([a], ["Q"], 1, "cmpl-1", "m",
                                       completions.Shape(echo=True), decode))
    assert echoed["choices"][0]["text"] == "Q" + a.raw_text
    chat = sent(convert.merge_choices([convert.chat_response(r, "chatcmpl-5", "m")
                                       for r in (a, b)], [a, b]))
    assert [set(c) for c in chat["choices"]] == [{"index", "message", "logprobs",
                                                  "finish_reason"}] * 2


def test_chunks_keep_their_wire_format(engine: SpecGuardEngine) -> None:
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 3, "model": "m"}
    role = {"role": "assistant", "content": ""}
    assert sent(chunks.chat_chunk("chatcmpl-1", "m", 3, role)) == {
        **head, "choices": [{"index": 0, "delta": role, "logprobs": None, "finish_reason": None}]}
    deltas = chunks.StepDeltas(stops=())
    result = engine.generate([{"role": "user", "content": "Weather?"}], tools=[WEATHER])
    delta = deltas.delta(result.steps[0])
    assert sent(chunks.chat_chunk("chatcmpl-1", "m", 3, delta, "tool_calls", {"run": {}}, True,
                                  1)) == {
        **head, "choices": [{"index": 1, "delta": delta, "logprobs": None,
                             "finish_reason": "tool_calls"}], "usage": None,
        "specguard": {"run": {}}}
    thinking = {"reasoning": "hm", "reasoning_content": "hm"}
    assert sent(chunks.chat_chunk("chatcmpl-1", "m", 3, thinking))["choices"][0]["delta"] == \
        thinking
    assert sent(chunks.completion_chunk("cmpl-1", "m", 3, "Hi", None, {"step": {}}, True)) == {
        "id": "cmpl-1", "object": "text_completion", "created": 3, "model": "m",
        "choices": [{"index": 0, "text": "Hi", "logprobs": None, "finish_reason": None}],
        "usage": None, "specguard": {"step": {}}}
    last = sent(chunks.completion_chunk("cmpl-1", "m", 3, "", "length", index=2))
    assert last["choices"] == [{"index": 2, "text": "", "logprobs": None,
                                "finish_reason": "length"}] and "usage" not in last
    for obj in ("chat.completion.chunk", "text_completion"):
        assert sent(chunks.usage_chunk("x", "m", 3, obj, [result, result])) == {
            "id": "x", "object": obj, "created": 3, "model": "m", "choices": [],
            "usage": convert.usage([result, result]).model_dump(exclude_unset=True)}


def test_a_key_openai_does_not_know_fails_here() -> None:
    with pytest.raises(ValueError, match=r"\$\.choices\[0\]\.delta\.contents"):
        chunks.sse(chunks.chat_chunk("c", "m", 1, {"contents": "typo"}))
    body = ChatCompletion(id="c", object="chat.completion", created=1, model="m", choices=[],
                          specguard={}, trace={})
    assert wire.unknown_keys(body) == ["$.trace"]
    stray = Completion(id="c", object="text_completion", created=1, model="m", choices=[],
                       usage={"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1,
                              "cost": 0})
    with pytest.raises(ValueError, match=r"\$\.usage\.cost"):
        wire.dump(stray)
    # the allowed extensions, only where they belong
    assert wire.unknown_keys(chunks.chat_chunk("c", "m", 1, {"reasoning": "r"})) == []
    bad = ChatCompletionChunk(id="c", object="chat.completion.chunk", created=1, model="m",
                              choices=[], reasoning="r")
    assert wire.unknown_keys(bad) == ["$.reasoning"]


def test_a_wrong_type_or_value_fails_here(engine: SpecGuardEngine) -> None:
    with pytest.raises(ValidationError):
        chunks.chat_chunk("c", "m", 1, {"content": "x"}, finish="max_steps")
    with pytest.raises(ValidationError):
        chunks.chat_chunk("c", "m", 1, {"content": 3})
    with pytest.raises(ValidationError):
        chunks.completion_chunk("c", "m", 1, "x", finish="tool_calls")
    with pytest.raises(ValidationError):
        chunks.usage_chunk("c", "m", 1, "chat.completion", engine.generate(Q))  # not a chunk


def test_what_the_server_sends_has_no_key_openai_does_not_know(engine: SpecGuardEngine) -> None:
    """Every body and chunk of the live server, read as the SDK reads it (extras allowed only
    where `wire.EXTRAS` says)."""
    chat = {"model": "specguard-scripted", "messages": [{"role": "user", "content": "Think only"}]}
    Kind = type[ChatCompletion] | type[ChatCompletionChunk] | type[Completion]
    tools = {**chat, "messages": [{"role": "user", "content": "W?"}], "tools": [WEATHER], "n": 2}
    prompt = {"model": "specguard-scripted", "prompt": "q", "n": 2}
    asks: list[tuple[str, dict[str, Any], Kind, Kind]] = [
        ("/v1/chat/completions", chat, ChatCompletion, ChatCompletionChunk),
        ("/v1/chat/completions", tools, ChatCompletion, ChatCompletionChunk),
        ("/v1/completions", prompt, Completion, Completion)]
    with live_server(create_app(engine)) as base:
        for path, body, kind, chunk_kind in asks:
            r = httpx.post(f"{base}{path}", json=body, timeout=60)
            assert r.status_code == 200, r.text
            assert wire.unknown_keys(kind.model_construct(**r.json())) == []
            if path.endswith("chat/completions"):
                r = httpx.post(f"{base}{path}", json={**body, "logprobs": True}, timeout=60)
                assert wire.unknown_keys(kind.model_construct(**r.json())) == []
            stream = {**body, "stream": True, "stream_options": {"include_usage": True}}
            with httpx.stream("POST", f"{base}{path}", json=stream, timeout=60) as s:
                events = sse_events(s.iter_lines())
            assert events[-1] == "[DONE]" and len(events) > 3
            for event in events[:-1]:
                assert wire.unknown_keys(chunk_kind.model_construct(**event)) == [], event
