"""The server over the scripted engine, through real uvicorn on loopback: endpoints, SSE framing,
tool calls, errors and statuses, auth, the queue, and client disconnects."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.fixtures import record_stream_configs

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.app import ServeSettings, create_app  # noqa: E402
from specguard_core.engine.loop import SpecGuardEngine  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import (  # noqa: E402
    ANSWER,
    WEATHER,
    after_tool,
    gated_reply,
    health,
    live_server,
    long_reply,
    raw,
    reply,
    sse_events,
    wait_for,
)

KEY = "sk-test-123"


def chat(base: str, timeout: float = 30, **body: Any) -> httpx.Response:
    body.setdefault("model", "specguard-scripted")
    body.setdefault("messages", [{"role": "user", "content": "What is (3 + 4) * 6?"}])
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=timeout)


def stream_events(base: str, path: str = "/v1/chat/completions", **body: Any) -> list[Any]:
    body.setdefault("model", "specguard-scripted")
    body["stream"] = True
    with httpx.stream("POST", f"{base}{path}", json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return sse_events(r.iter_lines())


def error_of(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


# ---- endpoints -----------------------------------------------------------------------------
def test_models_and_health(base: str) -> None:
    models = httpx.get(f"{base}/v1/models", timeout=5).json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["specguard-scripted"]
    assert models["data"][0]["specguard"]["draft"] == "scripted-draft"
    assert httpx.get(f"{base}/v1/models/specguard-scripted", timeout=5).json() == \
        models["data"][0]
    assert error_of(httpx.get(f"{base}/v1/models/gpt-4o", timeout=5), 404)["code"] == \
        "model_not_found"
    assert health(base) == {"status": "ok", "model": "specguard-scripted", "running": 0,
                            "queued": 0, "max_concurrent": 1, "max_queue": 16}


def test_chat_completion(base: str) -> None:
    r = chat(base, temperature=0, max_tokens=200)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": ANSWER, "refusal": None}
    assert choice["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    trace = body["specguard"]
    assert [s["index"] for s in trace["steps"]] == [0, 1, 2]
    assert "".join(s["text"] for s in trace["steps"]) == ANSWER
    assert all(s["source"] == "draft" and s["accepted"] for s in trace["steps"])
    assert trace["usage"]["completion_tokens"] == usage["completion_tokens"]
    assert sum(s["tokens"] for s in trace["steps"]) == usage["completion_tokens"]


def test_chat_stream_one_chunk_per_step(base: str) -> None:
    events = stream_events(base, messages=[{"role": "user", "content": "What is (3 + 4) * 6?"}],
                           stream_options={"include_usage": True})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    steps = [c for c in chunks if "step" in c.get("specguard", {})]
    assert [c["specguard"]["step"]["index"] for c in steps] == [0, 1, 2]
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert content == ANSWER
    final, usage = chunks[-2], chunks[-1]
    assert final["choices"][0]["finish_reason"] == "stop" and final["choices"][0]["delta"] == {}
    assert final["specguard"]["run"]["finish_reason"] == "stop"
    assert all(c["usage"] is None for c in chunks[:-1])  # include_usage: null until the end
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == \
        sum(c["specguard"]["step"]["tokens"] for c in steps)
    assert health(base)["running"] == 0


def test_stream_without_usage_has_no_usage_chunk(base: str) -> None:
    events = stream_events(base, messages=[{"role": "user", "content": "hi"}])
    assert events[-1] == "[DONE]"
    assert all("usage" not in c for c in events[:-1])
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(("stop", "text"), [  # the text before a stop keeps its space (vLLM)
    (["multiply"], "First, add 3 and 4 to get 7.\n\nThen "),
    ("7.\n\nThen", "First, add 3 and 4 to get "),  # spans two steps: the stream holds "7." back
])
def test_stop_string_cuts_text_and_stream(base: str, stop: Any, text: str) -> None:
    r = chat(base, stop=stop)
    assert r.json()["choices"][0]["message"]["content"] == text
    events = stream_events(base, messages=[{"role": "user", "content": "q"}], stop=stop)
    deltas = [c["choices"][0]["delta"].get("content", "") for c in events[:-1]]
    assert "".join(deltas) == text
    assert all("Then" not in d for d in deltas) or stop == ["multiply"]


@pytest.mark.parametrize(("stop", "text"), [
    (["multiply"], "First, add 3 and 4 to get 7.\n\nThen"),
    ("7.\n\nThen", "First, add 3 and 4 to get"),
])
def test_nothing_after_a_stop_string_is_in_the_trace(base: str, stop: Any, text: str) -> None:
    steps = chat(base, stop=stop).json()["specguard"]["steps"]
    assert "".join(s["text"] for s in steps).strip() == text
    assert all("by 6" not in s["text"] + (s["draft_text"] or "") for s in steps)
    events = stream_events(base, messages=[{"role": "user", "content": "q"}], stop=stop)
    streamed = [c["specguard"]["step"] for c in events[:-1] if "step" in c.get("specguard", {})]
    assert streamed and all("by 6" not in s["text"] for s in streamed)


def test_tool_call_in_openai_format(base: str) -> None:
    r = chat(base, tools=[WEATHER], messages=[{"role": "user", "content": "Weather in Paris?"}])
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert r.json()["specguard"]["steps"][0]["kind"] == "tool_call"


def test_tool_call_streamed(base: str) -> None:
    events = stream_events(base, tools=[WEATHER], tool_choice="required",
                           messages=[{"role": "user", "content": "Weather in Paris?"}])
    deltas = [c["choices"][0]["delta"] for c in events[:-1]]
    calls = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    assert len(calls) == 1 and calls[0][0]["index"] == 0 and calls[0][0]["id"].startswith("call_")
    assert json.loads(calls[0][0]["function"]["arguments"]) == {"city": "Paris"}
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_choice_none_and_named(base: str) -> None:
    none = chat(base, tools=[WEATHER], tool_choice="none").json()["choices"][0]
    assert none["message"]["content"] == ANSWER and "tool_calls" not in none["message"]
    named = chat(base, tools=[WEATHER], tool_choice={"type": "function",
                                                     "function": {"name": "get_weather"}})
    assert named.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == \
        "get_weather"


def test_tool_result_turn(base: str) -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24C"},
    ]
    r = chat(base, tools=[WEATHER], messages=messages)
    assert r.json()["choices"][0]["message"]["content"] == after_tool("sunny, 24C")


def test_response_format_reaches_the_model(base: str, engine: SpecGuardEngine) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    r = chat(base, response_format={"type": "json_schema",
                                    "json_schema": {"name": "place", "schema": schema}})
    assert json.loads(r.json()["choices"][0]["message"]["content"])["city"] == "Paris"
    assert any(json.dumps(schema) in p for p in engine.target.model.calls + engine.draft.model.calls)


def test_specguard_extension_overrides_config(base: str) -> None:
    r = chat(base, specguard={"tau": "inf"})  # never accept a draft step (JSON has no inf)
    steps = r.json()["specguard"]["steps"]
    assert steps and all(s["source"] == "target" and not s["accepted"] for s in steps)
    assert r.json()["choices"][0]["message"]["content"] == ANSWER


def test_max_tokens_gives_length(base: str) -> None:
    r = chat(base, max_completion_tokens=5).json()
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] <= 5


def test_completions(base: str) -> None:
    r = httpx.post(f"{base}/v1/completions", json={"model": "specguard-scripted",
                                                    "prompt": raw("What is (3 + 4) * 6?")},
                   timeout=30)
    body = r.json()
    assert body["object"] == "text_completion" and body["choices"][0]["text"] == ANSWER
    assert body["choices"][0]["finish_reason"] == "stop" and len(body["specguard"]["steps"]) == 3
    events = stream_events(base, "/v1/completions", prompt=[raw("What is (3 + 4) * 6?")],
                           stream_options={"include_usage": True})
    assert events[-1] == "[DONE]"
    assert "".join(c["choices"][0]["text"] for c in events[:-1] if c["choices"]) == ANSWER
    assert events[-2]["usage"]["total_tokens"] == body["usage"]["total_tokens"]


# ---- n choices and vLLM's sampling parameters ----------------------------------------------------
@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[Any]]]:
    """A server over its own scripted engine whose every `engine.stream` config is recorded."""
    engine = scripted_engine(reply)
    app = create_app(engine)
    seen = record_stream_configs(engine, monkeypatch)
    with live_server(app) as url:
        yield url, seen


def test_n_choices_are_runs_with_consecutive_seeds(spied: tuple[str, list[Any]]) -> None:
    base, seen = spied
    one = chat(base, temperature=0).json()
    body = chat(base, n=3, seed=7, temperature=0).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"] == ANSWER for c in body["choices"])  # greedy: the same
    assert [c.seed for c in seen[1:]] == [7, 8, 9]
    assert body["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]  # counted once
    assert body["usage"]["completion_tokens"] == 3 * one["usage"]["completion_tokens"]
    assert [len(t["steps"]) for t in body["specguard"]["choices"]] == [3, 3, 3]
    text = httpx.post(f"{base}/v1/completions", json={"model": "specguard-scripted", "n": 2,
                                                      "prompt": raw("q")}, timeout=30).json()
    assert [(c["index"], c["text"]) for c in text["choices"]] == [(0, ANSWER), (1, ANSWER)]
    events = stream_events(base, n=2, messages=[{"role": "user", "content": "q"}],
                           stream_options={"include_usage": True})
    chunks = [c for c in events[:-1] if c["choices"]]
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert "".join(c["delta"].get("content", "") for c in mine) == ANSWER
        assert mine[-1]["finish_reason"] == "stop"
    assert events[-2]["usage"]["completion_tokens"] == 2 * one["usage"]["completion_tokens"]
    assert health(base)["queued"] == 0 and health(base)["running"] == 0


def test_vllm_sampling_parameters_reach_the_engine(spied: tuple[str, list[Any]]) -> None:
    base, seen = spied
    r = chat(base, top_k=20, min_p=0.05, repetition_penalty=1.2)
    assert r.status_code == 200, r.text
    assert (seen[-1].top_k, seen[-1].min_p, seen[-1].repetition_penalty) == (20, 0.05, 1.2)
    chat(base, top_k=-1)  # vLLM's "all tokens"
    assert seen[-1].top_k == 0


def test_logprobs_of_the_answer_tokens(base: str) -> None:
    body = chat(base, logprobs=True, n=2).json()
    for choice in body["choices"]:
        content = choice["logprobs"]["content"]
        assert "".join(t["token"] for t in content).strip() == choice["message"]["content"]
        assert all(t["logprob"] <= 0 and t["top_logprobs"] == [] for t in content)  # none asked
        assert all(bytes(t["bytes"]).decode() == t["token"] for t in content)
        assert len(content) == body["usage"]["completion_tokens"] // 2 - 1  # all but the EOS
    cut = chat(base, logprobs=True, stop=["multiply"]).json()["choices"][0]
    text = "".join(t["token"] for t in cut["logprobs"]["content"])
    assert text.startswith(cut["message"]["content"]) and "by 6" not in text
    assert chat(base).json()["choices"][0]["logprobs"] is None


# ---- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "param", "needle"), [
    ({"messages": []}, "messages", "messages is empty"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages",
     "has role (not repeated); use system/user/assistant/tool"),
    ({"messages": [{"role": "robot" * 100, "content": "hi"}]}, "messages",
     "has role (not repeated); use system/user/assistant/tool"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "objekt"}}}}, "response_format", "invalid JSON schema: (not repeated); fix"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]},
     "tools", "invalid JSON schema"),
    ({"tools": [{"type": "retrieval"}]}, "tools", "not an OpenAI-style function tool"),
    ({"n": 0}, "n", "greater than or equal to 1"),
    ({"n": 17}, "n", "less than or equal to 16"),
    ({"top_k": -5}, "top_k", "top_k"),
    ({"min_p": 1.5}, "min_p", "min_p"),
    ({"repetition_penalty": 0}, "repetition_penalty", "repetition_penalty"),
    ({"logprobs": 3}, "logprobs", "boolean"),
    ({"top_logprobs": 2}, "top_logprobs", "needs logprobs=true"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "less than or equal to 20"),
    ({"presence_penalty": 2.5}, "presence_penalty", "less than or equal to 2"),
    ({"functions": [{"name": "f"}]}, "functions", "tools="),
    ({"temperature": 3}, "temperature", "less than or equal to 2"),
    ({"frobnicate": 1}, "frobnicate", "Unrecognized request argument"),
    ({"tool_choice": "required"}, "tool_choice", "requires tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice", "names (not repeated), which is not among the tools offered"),
    ({"specguard": {"k": 0}}, "specguard", "k"),
    ({"specguard": {"heterogeneous": True}}, "specguard", "engine setting"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages", "text only"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "stream=true"),
])
def test_bad_requests_are_400(base: str, body: dict[str, Any], param: str | None,
                              needle: str) -> None:
    err = error_of(chat(base, **body), 400)
    assert needle in err["message"] and err["type"] == "invalid_request_error"
    assert err["param"] == param
    assert health(base)["queued"] == 0


def test_prompt_over_context_window_is_400(base: str) -> None:
    long = " ".join(str(i) for i in range(20000))
    err = error_of(chat(base, messages=[{"role": "user", "content": long}]), 400)
    assert err["message"].startswith("This model's maximum context length is 32768 tokens.")
    assert (err["code"], err["param"]) == ("context_length_exceeded", "messages")


def test_missing_model_bad_json_and_unknown_model(base: str) -> None:
    r = httpx.post(f"{base}/v1/chat/completions", json={"messages": []}, timeout=5)
    assert "model" in error_of(r, 400)["message"]
    r = httpx.post(f"{base}/v1/chat/completions", content=b"{not json", timeout=5,
                   headers={"content-type": "application/json"})
    assert "not valid JSON" in error_of(r, 400)["message"]
    err = error_of(chat(base, model="gpt-4o"), 404)
    assert err["code"] == "model_not_found" and "specguard-scripted" in err["message"]
    assert error_of(httpx.get(f"{base}/v1/nothing", timeout=5), 404)["type"] == "not_found_error"


def test_api_key(engine: SpecGuardEngine) -> None:
    with live_server(create_app(engine, ServeSettings(api_key=KEY))) as url:
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200  # probes need no key
        err = error_of(httpx.get(f"{url}/v1/models", timeout=5), 401)
        assert err["type"] == "authentication_error" and err["code"] == "invalid_api_key"
        wrong = {"Authorization": "Bearer sk-wrong"}
        error_of(httpx.post(f"{url}/v1/chat/completions", headers=wrong, timeout=5,
                            json={"model": "specguard-scripted", "messages": []}), 401)
        right = {"Authorization": f"Bearer {KEY}"}
        r = httpx.post(f"{url}/v1/chat/completions", headers=right, timeout=30,
                       json={"model": "specguard-scripted",
                             "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == ANSWER


def test_engine_failure_is_500_and_frees_the_slot(caplog: pytest.LogCaptureFixture) -> None:
    def broken(prompt: str) -> str:
        raise RuntimeError("the model fell over at /srv/secret/path")

    with live_server(create_app(scripted_engine(broken))) as url:
        err = error_of(chat(url), 500)
        assert err["type"] == "server_error" and "RuntimeError" in err["message"]
        events = stream_events(url, messages=[{"role": "user", "content": "hi"}])
        assert events[-1] == "[DONE]" and "RuntimeError" in events[-2]["error"]["message"]
        # the details go to the server's log, not to the client
        assert "/srv/secret" not in json.dumps([err, events[-2]])
        assert "the model fell over" in caplog.text
        assert health(url)["running"] == 0 and health(url)["queued"] == 0


# ---- queue and disconnects ------------------------------------------------------------------
def test_queue_full_is_503_and_queue_drains() -> None:
    gate = threading.Event()
    app = create_app(scripted_engine(gated_reply(gate)), ServeSettings(max_concurrent=1,
                                                                       max_queue=1))
    with live_server(app) as url, ThreadPoolExecutor(2) as pool:
        try:
            first = pool.submit(chat, url)
            assert wait_for(lambda: health(url)["running"] == 1)
            second = pool.submit(chat, url)
            assert wait_for(lambda: health(url)["queued"] == 1)
            full = chat(url)
            assert full.headers["retry-after"] == "1"
            err = error_of(full, 503)
            assert err["code"] == "queue_full" and "--max-queue" in err["message"]
        finally:
            gate.set()
        for fut in (first, second):
            assert fut.result(timeout=30).json()["choices"][0]["message"]["content"] == ANSWER
        assert health(url) | {"running": 0, "queued": 0} == health(url)


def test_disconnect_mid_stream_cancels_and_frees_the_slot() -> None:
    engine = scripted_engine(long_reply(steps=200, delay_s=0.002))
    opened: list[Any] = []
    real_stream = engine.stream

    def recording_stream(*args: Any, **kwargs: Any) -> Any:
        opened.append(real_stream(*args, **kwargs))
        return opened[-1]

    engine.stream = recording_stream  # type: ignore[method-assign]
    with live_server(create_app(engine)) as url:
        body = {"model": "specguard-scripted", "stream": True,
                "messages": [{"role": "user", "content": "count"}]}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as r:
            lines = r.iter_lines()
            seen = [line for line, _ in zip(lines, range(4), strict=False)]  # role chunk + 1 step
            assert any('"step"' in line for line in seen)
        # the client has gone: the server notices, closes the generation, frees the slot
        assert wait_for(lambda: health(url)["running"] == 0 and health(url)["queued"] == 0)
        (stream,) = opened
        assert wait_for(lambda: stream.cancelled)
        with pytest.raises(RuntimeError, match="has not finished"):
            stream.result  # noqa: B018 - cut short: the run never completed its 200 steps
        # the engine is free again: the next request runs to the end
        engine.stream = real_stream  # type: ignore[method-assign]
        r2 = chat(url, max_tokens=12)
        assert r2.status_code == 200 and r2.json()["choices"][0]["finish_reason"] == "length"


def test_queued_client_that_leaves_gives_up_its_place() -> None:
    gate = threading.Event()
    app = create_app(scripted_engine(gated_reply(gate)),
                     ServeSettings(max_concurrent=1, max_queue=1, queue_poll_s=0.05))
    with live_server(app) as url, ThreadPoolExecutor(1) as pool:
        try:
            first = pool.submit(chat, url)
            assert wait_for(lambda: health(url)["running"] == 1)
            with pytest.raises(httpx.ReadTimeout):
                chat(url, timeout=0.5)  # queued behind `first`, then the client gives up
            assert wait_for(lambda: health(url)["queued"] == 0)
        finally:
            gate.set()
        assert first.result(timeout=30).status_code == 200


TWO_CALLS = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_tool_calls_false_keeps_the_first_call(stream: bool) -> None:
    engine = scripted_engine(lambda prompt: TWO_CALLS if "<tools>" in prompt else "ok")
    body = {"tools": [WEATHER], "messages": [{"role": "user", "content": "Paris and Rome?"}]}
    with live_server(create_app(engine)) as url:
        def cities(parallel: bool | None) -> list[str]:
            extra = {} if parallel is None else {"parallel_tool_calls": parallel}
            if stream:
                deltas = [c["choices"][0]["delta"] for c in stream_events(url, **body, **extra)[:-1]]
                calls = [c for d in deltas for c in d.get("tool_calls", [])]
            else:
                calls = chat(url, **body, **extra).json()["choices"][0]["message"]["tool_calls"]
            return [json.loads(c["function"]["arguments"])["city"] for c in calls]

        assert cities(None) == cities(True) == ["Paris", "Rome"]
        assert cities(False) == ["Paris"]
        if not stream:  # the reply ended with its first call: the second was never written
            used = {p: chat(url, **body, parallel_tool_calls=p).json()["usage"]["completion_tokens"]
                    for p in (True, False)}
            assert used[False] < used[True]


MISSPELT = '<tool_call>\n{"name": "get_wether", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.mark.parametrize("stream", [False, True])
def test_a_misspelt_call_comes_back_as_a_call_so_the_agent_can_answer_it(stream: bool) -> None:
    """As vLLM's Hermes parser does: a call that names a tool with JSON arguments is a tool call
    (the client's tool node answers "not a valid tool" and the model retries), never dropped."""
    engine = scripted_engine(lambda prompt: MISSPELT if "<tools>" in prompt else "ok")
    body = {"tools": [WEATHER], "messages": [{"role": "user", "content": "Paris?"}]}
    with live_server(create_app(engine)) as url:
        if stream:
            events = stream_events(url, **body)[:-1]
            calls = [c for e in events for c in e["choices"][0]["delta"].get("tool_calls", [])]
            finish = events[-1]["choices"][0]["finish_reason"]
            trace = events[-1]["specguard"]["run"]
        else:
            choice = chat(url, **body).json()
            trace, choice = choice["specguard"], choice["choices"][0]
            calls, finish = choice["message"]["tool_calls"], choice["finish_reason"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_wether", {"city": "Paris"})]
    assert finish == "tool_calls"
    assert "unknown tool" in trace["invalid_tool_calls"][0]["error"]  # the trace says why


def test_vllm_fields_at_their_no_op_values_are_accepted(base: str) -> None:
    no_ops = {"skip_special_tokens": True, "include_stop_str_in_output": False, "min_tokens": 0,
              "continue_final_message": False, "add_generation_prompt": True, "echo": False,
              "ignore_eos": False, "spaces_between_special_tokens": True}
    r = chat(base, messages=[{"role": "user", "content": "q"}], **no_ops)
    assert r.status_code == 200, r.text
    events = stream_events(base, messages=[{"role": "user", "content": "q"}],
                           stream_options={"include_usage": True, "continuous_usage_stats": False})
    usage = [e["usage"] for e in events if isinstance(e, dict) and e.get("usage")]
    assert usage and usage[-1]["completion_tokens"] > 0
    for name, value in {"skip_special_tokens": False, "min_tokens": 5,
                        "include_stop_str_in_output": True, "continue_final_message": True,
                        "ignore_eos": True, "spaces_between_special_tokens": False}.items():
        bad = chat(base, messages=[{"role": "user", "content": "q"}], **{name: value})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == name, bad.text
