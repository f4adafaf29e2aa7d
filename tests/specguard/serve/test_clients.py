"""Real clients against a live server (uvicorn on 127.0.0.1, a free port, the scripted engine):
the official `openai` SDK, LangChain's `ChatOpenAI` in a LangGraph agent, LlamaIndex's
`OpenAILike` in a FunctionAgent, and 32 concurrent clients against their serial runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")

from specguard.serve.app import ServeSettings, create_app  # noqa: E402
from specguard_core.engine.loop import SpecGuardEngine  # noqa: E402
from specguard_core.testing import scripted_engine  # noqa: E402
from tests.specguard.serve.serve_helpers import (  # noqa: E402
    ANSWER,
    WEATHER,
    after_tool,
    live_server,
    raw,
    reply,
)

MODEL = "specguard-scripted"
KEY = "sk-clients"


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return scripted_engine(reply)


@pytest.fixture(scope="module")
def base(engine: SpecGuardEngine) -> Iterator[str]:
    settings = ServeSettings(api_key=KEY, max_concurrent=4, max_queue=64)
    with live_server(create_app(engine, settings)) as url:
        yield f"{url}/v1"


@pytest.fixture
def client(base: str) -> Any:
    return openai.OpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=30)


def test_openai_plain_and_usage(client: Any) -> None:
    out = client.chat.completions.create(model=MODEL, temperature=0, seed=1, max_tokens=200,
                                         messages=[{"role": "user", "content": "(3 + 4) * 6?"}])
    assert out.choices[0].message.content == ANSWER
    assert out.choices[0].finish_reason == "stop"
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens > 0
    steps = out.model_extra["specguard"]["steps"]  # the extension field survives the SDK
    assert [s["kind"] for s in steps] == ["answer"] * 3
    assert [m.id for m in client.models.list()] == [MODEL]


def test_openai_streaming(client: Any) -> None:
    chunks = list(client.chat.completions.create(
        model=MODEL, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "(3 + 4) * 6?"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ANSWER
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert sum("step" in (c.model_extra or {}).get("specguard", {}) for c in chunks) == 3


def test_openai_tools_and_tool_choice(client: Any) -> None:
    out = client.chat.completions.create(
        model=MODEL, tools=[WEATHER], tool_choice="required",
        messages=[{"role": "user", "content": "Weather in Paris?"}])
    (call,) = out.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == \
        {"city": "Paris"}
    assert out.choices[0].finish_reason == "tool_calls"
    follow = client.chat.completions.create(model=MODEL, tools=[WEATHER], messages=[
        {"role": "user", "content": "Weather in Paris?"}, out.choices[0].message.model_dump(),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
    assert follow.choices[0].message.content == after_tool("sunny")
    stream = client.chat.completions.create(
        model=MODEL, tools=[WEATHER], stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        messages=[{"role": "user", "content": "Weather in Paris?"}])
    deltas = [d for c in stream for d in (c.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.function.name) for d in deltas] == [(0, "get_weather")]


def test_openai_response_format(client: Any) -> None:
    out = client.chat.completions.create(
        model=MODEL, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Where?"}])
    assert json.loads(out.choices[0].message.content) == {"city": "Paris", "days": 2}


def test_openai_completions(client: Any) -> None:
    out = client.completions.create(model=MODEL, prompt=raw("(3 + 4) * 6?"), max_tokens=100)
    assert out.choices[0].text == ANSWER


def test_openai_n_choices_and_vllm_extra_body(client: Any) -> None:
    out = client.chat.completions.create(
        model=MODEL, n=2, temperature=0, messages=[{"role": "user", "content": "(3 + 4) * 6?"}],
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.0})
    assert [(c.index, c.message.content) for c in out.choices] == [(0, ANSWER), (1, ANSWER)]
    scored = client.chat.completions.create(model=MODEL, logprobs=True,
                                            messages=[{"role": "user", "content": "(3 + 4) * 6?"}])
    tokens = scored.choices[0].logprobs.content
    assert "".join(t.token for t in tokens).strip() == ANSWER and tokens[0].logprob <= 0


def test_openai_errors_map_to_sdk_exceptions(base: str, client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[])
    assert "messages is empty" in bad.value.message
    with pytest.raises(openai.BadRequestError, match="less than or equal to 16"):
        client.chat.completions.create(model=MODEL, n=17, messages=[{"role": "user", "content": "q"}])
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(model=MODEL, top_logprobs=3,
                                       messages=[{"role": "user", "content": "q"}])
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "q"}])
    stranger = openai.OpenAI(base_url=base, api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()


def test_langchain_chat_openai_in_a_langgraph_agent(base: str) -> None:
    pytest.importorskip("langchain_openai")
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    model = ChatOpenAI(model=MODEL, base_url=base, api_key=KEY, temperature=0, max_retries=0)
    agent = create_agent(model, tools=[multiply])
    messages = agent.invoke({"messages": [HumanMessage("What is 6 times 7?")]})["messages"]
    call, result, answer = messages[1:]
    assert isinstance(call, AIMessage) and [(c["name"], c["args"]) for c in call.tool_calls] == \
        [("multiply", {"a": 6, "b": 7})]
    assert isinstance(result, ToolMessage) and result.content == "42"
    assert isinstance(answer, AIMessage) and answer.content == after_tool("42")
    streamed = "".join(str(c.content) for c in model.stream("(3 + 4) * 6?"))
    assert streamed == ANSWER


def test_llama_index_openai_like_in_a_function_agent(base: str) -> None:
    pytest.importorskip("llama_index.llms.openai_like")
    from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
    from llama_index.llms.openai_like import OpenAILike

    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    llm = OpenAILike(model=MODEL, api_base=base, api_key=KEY, is_chat_model=True,
                     is_function_calling_model=True, context_window=32768, max_retries=0)
    agent = FunctionAgent(tools=[multiply], llm=llm, system_prompt="You are a calculator.")

    async def run() -> tuple[Any, list[Any]]:
        handler = agent.run(user_msg="What is 6 times 7?")
        events = [e async for e in handler.stream_events()]
        return await handler, events

    result, events = asyncio.run(run())
    calls = [e for e in events if isinstance(e, ToolCallResult)]
    assert [(c.tool_name, c.tool_kwargs, c.tool_output.content) for c in calls] == \
        [("multiply", {"a": 6, "b": 7}, "42")]
    assert str(result.response.content) == after_tool("42")


def test_32_concurrent_clients_match_their_serial_runs(base: str, client: Any) -> None:
    words = [f"w{i}x" for i in range(32)]

    def ask(c: Any, word: str) -> Any:
        return c.chat.completions.create(model=MODEL, temperature=0,
                                         messages=[{"role": "user", "content": f"Repeat: {word}"}])

    serial = {w: ask(client, w) for w in words}

    async def together() -> list[Any]:
        aclient = openai.AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0, timeout=60)
        return await asyncio.gather(*(aclient.chat.completions.create(
            model=MODEL, temperature=0, messages=[{"role": "user", "content": f"Repeat: {w}"}])
            for w in words))

    for word, out in zip(words, asyncio.run(together()), strict=True):
        ref = serial[word]
        assert out.choices[0].message.content == ref.choices[0].message.content == \
            f"You said {word}.\n\nThat is all."
        assert [s["text"] for s in out.model_extra["specguard"]["steps"]] == \
            [s["text"] for s in ref.model_extra["specguard"]["steps"]]
        assert out.usage == ref.usage


def test_openai_json_schema_answer_comes_back_without_its_fence() -> None:
    """Coder models fence JSON by habit; the check unfences it, and so does the answer the SDK
    gets, so `json.loads` (what LangChain's and the SDK's parsers do) reads it."""
    fenced = '```json\n{"city": "Paris", "days": 2}\n```'
    engine = scripted_engine(lambda prompt: fenced)
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "days": {"type": "integer"}},
              "required": ["city", "days"]}
    with live_server(create_app(engine, ServeSettings(api_key=KEY))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=30)
        out = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Where?"}],
            response_format={"type": "json_schema", "json_schema": {"name": "Trip",
                                                                    "schema": schema}})
    assert json.loads(out.choices[0].message.content) == {"city": "Paris", "days": 2}


def test_content_parts_give_the_engine_s_prompt(engine: SpecGuardEngine, client: Any) -> None:
    """One normaliser for both doors: text parts reach the template as the engine joins them."""
    parts = [{"type": "text", "text": "Repeat: "}, {"type": "text", "text": "hello"}]
    out = client.chat.completions.create(model=MODEL,
                                         messages=[{"role": "user", "content": parts}])
    direct = engine.generate([{"role": "user", "content": parts}])
    assert out.choices[0].message.content == direct.text
