"""What vLLM clients send and expect, through a live server: chat_template_kwargs reach the chat
template (and are checked as untrusted), reasoning comes as `reasoning` and `reasoning_content`,
endpoints this server lacks are OpenAI error JSON, and error messages never repeat client text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.app import create_app  # noqa: E402
from specguard_core.engine.loop import SpecGuardEngine  # noqa: E402
from specguard_core.testing import QWEN_STYLE_TEMPLATE, scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import (  # noqa: E402
    WEATHER,
    error_of,
    health,
    live_server,
    post_chat,
    reply,
    sse_events,
)

THOUGHT, ANSWER = "Let me add 3 and 4.", "The answer is 42."
NO_THINK = "{% if enable_thinking is defined and not enable_thinking %}/no_think\n{% endif %}"
MARK = "zq-marker-<b>x</b>"  # a client string no error message may repeat


def responder(prompt: str) -> str:
    """Thinks aloud unless the template said /no_think (Qwen3's enable_thinking=false)."""
    if "What is" not in prompt:
        return reply(prompt)
    return ANSWER if "/no_think" in prompt else f"<think>\n{THOUGHT}\n</think>\n\n{ANSWER}"


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    engine = scripted_engine(responder)
    engine.tokenizer.chat_template = QWEN_STYLE_TEMPLATE.replace(
        "{% if add_generation_prompt %}", NO_THINK + "{% if add_generation_prompt %}")
    return engine


@pytest.fixture(scope="module")
def base(engine: SpecGuardEngine) -> Iterator[str]:
    with live_server(create_app(engine)) as url:
        yield url


def stream(base: str, **body: Any) -> list[Any]:
    body = {"model": "specguard-scripted", "stream": True,
            "messages": [{"role": "user", "content": "What is (3 + 4) * 6?"}], **body}
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        return sse_events(r.iter_lines())


def test_reasoning_comes_under_both_names(base: str) -> None:
    message = post_chat(base).json()["choices"][0]["message"]
    assert message["content"] == ANSWER
    assert message["reasoning"] == message["reasoning_content"] == THOUGHT
    deltas = [c["choices"][0]["delta"] for c in stream(base)[:-1] if c["choices"]]
    said = [d for d in deltas if "reasoning" in d or "reasoning_content" in d]
    assert said and all(d["reasoning"] == d["reasoning_content"] for d in said)
    assert "".join(d["reasoning"] for d in said).strip() == THOUGHT


def test_chat_template_kwargs_reach_the_template(base: str) -> None:
    quiet = post_chat(base, chat_template_kwargs={"enable_thinking": False}).json()
    message = quiet["choices"][0]["message"]
    assert message["content"] == ANSWER and "reasoning" not in message
    loud = post_chat(base, chat_template_kwargs={"enable_thinking": True}).json()
    assert loud["choices"][0]["message"]["reasoning"] == THOUGHT
    deltas = [c["choices"][0]["delta"] for c in stream(
        base, chat_template_kwargs={"enable_thinking": False})[:-1] if c["choices"]]
    assert not any("reasoning" in d for d in deltas)


@pytest.mark.parametrize("kwargs", [
    ["enable_thinking"], "no", 5,  # not an object
    {"tools": "x"}, {"add_generation_prompt": False},  # apply_chat_template's own parameters
    {"eos_token": "<|im_start|>"}, {"additional_special_tokens": []},  # special tokens
    {"bad name": True}, {"x" * 65: 1},  # not plain names
    {"nested": {"a": 1}}, {"listed": [1]}, {"long": "x" * 1025},  # not short scalars
    {f"v{i}": i for i in range(17)},  # too many
])
def test_bad_chat_template_kwargs_are_400(base: str, kwargs: Any) -> None:
    err = error_of(post_chat(base, chat_template_kwargs=kwargs), 400)
    assert err["param"] == "chat_template_kwargs" and "chat_template_kwargs" in err["message"]
    assert health(base)["queued"] == 0


@pytest.mark.parametrize(("method", "path", "named"), [
    ("POST", "/v1/responses", "/v1/responses"), ("POST", "/v1/embeddings", "/v1/embeddings"),
    ("POST", "/v1/audio/speech", "/v1/audio"), ("GET", "/v1/files", "/v1/files"),
    ("POST", "/v1/frobnicate", None), ("GET", f"/v1/{MARK}", None), ("GET", "/", None),
])
def test_endpoints_not_served_are_openai_errors(base: str, method: str, path: str,
                                                named: str | None) -> None:
    r = httpx.request(method, f"{base}{path}", json={"model": "specguard-scripted"}, timeout=10)
    err = error_of(r, 404)
    assert err["type"] == "not_found_error" and err["code"] == "unknown_endpoint"
    assert "POST /v1/chat/completions" in err["message"] and "GET /v1/models" in err["message"]
    if named:
        assert f"{named} is not an endpoint of this server" in err["message"]
    assert "marker" not in err["message"] and "model" not in err["code"]


def test_a_wrong_method_is_an_openai_error(base: str) -> None:
    r = httpx.get(f"{base}/v1/chat/completions", timeout=10)
    err = error_of(r, 405)
    assert "not allowed" in err["message"] and "POST" in r.headers["allow"]


@pytest.mark.parametrize("body", [
    {"messages": [{"role": MARK, "content": "hi"}]},
    {"messages": [{"role": "user", "content": [{"type": MARK}]}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": 1, "k": MARK}]}]},
    {"tools": [WEATHER, {"type": "function", "function": {"name": MARK}},
               {"type": "function", "function": {"name": MARK}}]},
    {"tools": [{"type": "function", "function": {"name": MARK, "parameters": {"type": 5}}}]},
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": MARK}}}}}]},
    {"tools": [{"type": "function", "function": {"name": MARK, "parameters": {
        "type": "object", "properties": {"a": {"$ref": f"#/$defs/{MARK}"}}}}}]},
    {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": MARK}}},
    {"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": MARK, "arguments": "{not json"}}]},
        {"role": "user", "content": "What is 2 + 2?"}]},
])
def test_error_messages_name_the_field_not_the_value(base: str, body: dict[str, Any]) -> None:
    err = error_of(post_chat(base, **body), 400)
    assert "marker" not in err["message"] and "<b>" not in err["message"], err["message"]
    assert err["param"] in ("messages", "tools", "tool_choice"), err
    assert health(base)["queued"] == 0


def test_error_messages_do_not_name_the_served_models(engine: SpecGuardEngine) -> None:
    with live_server(create_app(engine)) as url:
        long = " ".join(str(i) for i in range(20000))
        err = error_of(post_chat(url, messages=[{"role": "user", "content": long}]), 400)
    assert "This model's maximum context length is" in err["message"]
    assert "scripted-target" not in err["message"] and "scripted-draft" not in err["message"]


@pytest.mark.parametrize("body", [
    {"metadata": {MARK: 5}},  # a value of the wrong type under a client's key
    {MARK: 1},  # an unknown field
    {"metadata": {MARK: "\ud800"}},  # a lone surrogate under a client's key
])
def test_validation_errors_do_not_repeat_client_keys(base: str, body: dict[str, Any]) -> None:
    r = httpx.post(f"{base}/v1/chat/completions", timeout=30, headers={
        "Content-Type": "application/json"}, content=json.dumps(
            {"model": "specguard-scripted", "messages": [{"role": "user", "content": "hi"}],
             **body}).encode())
    err = error_of(r, 400)
    assert "marker" not in err["message"] and "marker" not in (err["param"] or ""), err
