"""Untrusted text and everyday bad bodies through a live server: strings that are not Unicode,
model output that does not encode, regular expressions in client schemas (matched in bounded
time), malformed formats,
huge numbers and deep nesting are OpenAI error JSON (or a clean answer), never a plain-text 500,
and a slot is always freed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from specguard.serve.app import create_app  # noqa: E402
from specguard_core.engine.loop import SpecGuardEngine  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import (  # noqa: E402
    WEATHER,
    error_of,
    health,
    live_server,
    post_chat,
    reply,
    sse_events,
)

# tool calls whose JSON escapes decode to a lone surrogate (model output: untrusted)
BAD_ARGS = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "\\ud800"}}\n</tool_call>'
BAD_NAME = '<tool_call>\n{"name": "\\udc00x", "arguments": {}}\n</tool_call>'


LONG_WORD_CALL = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "'
                  + "a" * 200 + '!"}}\n</tool_call>')


def responder(prompt: str) -> str:
    if "<tools>" in prompt and "slow-pattern" in prompt:
        return LONG_WORD_CALL
    if "<tools>" in prompt and "bad-args" in prompt:
        return BAD_ARGS
    if "<tools>" in prompt and "bad-name" in prompt:
        return BAD_NAME
    return reply(prompt)


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return scripted_engine(responder)


@pytest.fixture(scope="module")
def base(engine: SpecGuardEngine) -> Iterator[str]:
    with live_server(create_app(engine)) as url:
        yield url


def raw_post(base: str, text: str) -> httpx.Response:
    return httpx.post(f"{base}/v1/chat/completions", content=text.encode(), timeout=30,
                      headers={"content-type": "application/json"})


def idle(base: str) -> bool:
    h = health(base)
    return h["running"] == 0 and h["queued"] == 0


def test_client_strings_that_are_not_unicode_are_400(base: str) -> None:
    body = ('{"model": "specguard-scripted", "messages": [{"role": "user", '
            '"content": "hi \\ud800"}]}')
    err = error_of(raw_post(base, body), 400)
    assert "surrogate" in err["message"] and err["param"] == "messages[0].content"
    key = '{"model": "specguard-scripted", "messages": [], "\\udfff": 1}'
    assert "surrogate" in error_of(raw_post(base, key), 400)["message"]
    assert idle(base)


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_tool_call_that_decodes_to_a_lone_surrogate(base: str, stream: bool) -> None:
    body = {"model": "specguard-scripted", "tools": [WEATHER], "stream": stream,
            "messages": [{"role": "user", "content": "bad-args"}]}
    if not stream:
        r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200, r.text
        json.dumps(r.json()).encode("utf-8")  # the client got UTF-8 JSON
    else:
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=30) as s:
            assert s.status_code == 200
            events = sse_events(s.iter_lines())
        assert events[-1] == "[DONE]"
    assert idle(base)  # the slot is free again


def test_a_tool_call_whose_arguments_are_not_unicode_is_invalid(base: str) -> None:
    r = post_chat(base, tools=[WEATHER], messages=[{"role": "user", "content": "bad-args"}])
    assert r.status_code == 200, r.text
    body = r.json()
    assert "tool_calls" not in body["choices"][0]["message"]  # never handed to the client's tool
    invalid = body["specguard"]["invalid_tool_calls"]
    assert invalid and all("surrogate" in c["error"] for c in invalid)


def test_a_model_written_tool_name_that_is_a_lone_surrogate(base: str) -> None:
    r = post_chat(base, tools=[WEATHER], messages=[{"role": "user", "content": "bad-name"}])
    assert r.status_code == 200, r.text
    (bad, *_) = r.json()["specguard"]["invalid_tool_calls"]
    assert bad["name"] == "\ufffdx"  # replaced, not a failed response
    assert "tool_calls" not in r.json()["choices"][0]["message"]
    assert idle(base)


def weather_with(prop: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": prop}, **extra}}}


@pytest.mark.parametrize("fields", [
    {"tools": [weather_with({"type": "string", "pattern": "^[A-Z][a-z]+$"})]},
    {"tools": [weather_with({"type": "string"}, patternProperties={"^x": {}})]},
    {"tools": [weather_with({"$ref": "#/$defs/c"}, **{"$defs": {"c": {"pattern": "^P"}}})]},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Z]"}}}}}},
])
def test_regular_expressions_in_client_schemas_are_taken(base: str, fields: dict[str, Any]
                                                          ) -> None:
    r = post_chat(base, **fields)
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    if "tools" in fields:
        assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    else:
        assert json.loads(message["content"])["city"][0].isupper()
    assert idle(base)


@pytest.mark.parametrize(("fields", "param"), [
    ({"tools": [weather_with({"type": "string", "pattern": "(a"})]}, "tools"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "[z-a]"}}}}}},
     "response_format"),
])
def test_a_pattern_that_is_not_a_regular_expression_is_400(base: str, fields: dict[str, Any],
                                                           param: str) -> None:
    err = error_of(post_chat(base, **fields), 400)
    assert err["param"] == param and "invalid JSON schema" in err["message"]
    assert "(a" not in err["message"] and "[z-a]" not in err["message"]
    assert idle(base)


def test_a_pattern_that_backtracks_forever_is_matched_in_bounded_time(base: str) -> None:
    """The model's call is checked against the tool's pattern in bounded time: refused at once,
    never a hung server (Python's re backtracks 2**200 ways on this value)."""
    tool = weather_with({"type": "string", "pattern": "^(\\w+\\s?)*$"})
    t0 = time.perf_counter()
    r = post_chat(base, tools=[tool], messages=[{"role": "user", "content": "slow-pattern"}])
    assert r.status_code == 200, r.text
    (bad,) = r.json()["specguard"]["invalid_tool_calls"]
    assert "took over" in bad["error"] or "does not match" in bad["error"]
    assert time.perf_counter() - t0 < 20
    assert idle(base)


def test_a_property_named_pattern_is_fine(base: str) -> None:
    tool = weather_with({"type": "string"})
    tool["function"]["parameters"]["properties"]["pattern"] = {"type": "string"}
    assert post_chat(base, tools=[tool]).status_code == 200


@pytest.mark.parametrize("json_schema", ["not an object", 5, {"name": "r"}, {"schema": "x"},
                                         {"name": 5, "schema": {}}])
def test_a_json_schema_format_that_is_not_an_object_is_400(base: str, json_schema: Any) -> None:
    fmt = {"type": "json_schema", "json_schema": json_schema}
    err = error_of(post_chat(base, response_format=fmt), 400)
    assert err["param"] == "response_format" and "json_schema" in err["message"]


def test_huge_numbers_and_deep_nesting_are_400_json(base: str) -> None:
    huge = '{"model": "specguard-scripted", "messages": [], "seed": ' + "9" * 5001 + "}"
    assert "4300 digits" in error_of(raw_post(base, huge), 400)["message"]
    big_seed = post_chat(base, seed=int("9" * 4000))
    assert error_of(big_seed, 400)["param"] == "seed" and "9999" not in big_seed.text
    for depth in (100, 100_000):
        nested = "[" * depth + "]" * depth
        body = '{"model": "specguard-scripted", "messages": [], "metadata": ' + nested + "}"
        assert "nested" in error_of(raw_post(base, body), 400)["message"]
    assert idle(base)


def test_an_unexpected_error_is_openai_json(engine: SpecGuardEngine,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> str:
        raise KeyError("an internal detail")

    monkeypatch.setattr(engine, "token_text", broken)
    with live_server(create_app(engine)) as url:
        r = post_chat(url, logprobs=True)
        err = error_of(r, 500)
        assert err["type"] == "server_error" and "internal detail" not in r.text
        assert idle(url)
