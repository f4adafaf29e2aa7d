"""`SpecGuardLLM` over a real engine with scripted models: chat, streaming, async, tools, usage."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.callbacks import CallbackManager, TokenCountingHandler
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel

from specguard_core.engine.loop import SpecGuardEngine
from specguard_core.text.chat import InputError
from specguard_integrations.llama_index import (
    SpecGuardLLM,
    to_engine_messages,
    tool_selections,
)
from tests.specguard_integrations.llama_index.helpers import (
    GREETING,
    make_engine,
    respond,
    tool_call,
    weak_draft,
)

HI = [ChatMessage(role="user", content="hi")]


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


WEATHER = FunctionTool.from_defaults(get_weather)


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return make_engine()


@pytest.fixture
def llm(engine: SpecGuardEngine) -> SpecGuardLLM:
    return SpecGuardLLM(engine=engine)


# ---- construction and metadata -----------------------------------------------------------------
def test_is_a_function_calling_llm_with_real_metadata(llm: SpecGuardLLM) -> None:
    assert isinstance(llm, FunctionCallingLLM)
    meta = llm.metadata
    assert meta.context_window == llm.engine.context_window == 32768
    assert meta.num_output == llm.engine.config.max_new_tokens == 400
    assert meta.is_chat_model and meta.is_function_calling_model
    assert meta.model_name == "specguard-scripted"
    assert SpecGuardLLM.class_name() == "SpecGuardLLM"


def test_metadata_follows_overrides(engine: SpecGuardEngine) -> None:
    llm = SpecGuardLLM(engine=engine, max_tokens=64, context_window=2048, model_name="mine")
    assert (llm.metadata.num_output, llm.metadata.context_window) == (64, 2048)
    assert llm.metadata.model_name == "mine"
    cfg = engine.config.merged(max_new_tokens=9)
    assert SpecGuardLLM(engine=engine, config=cfg).metadata.num_output == 9


def test_constructor_is_cheap_and_loads_once(monkeypatch: pytest.MonkeyPatch,
                                             engine: SpecGuardEngine) -> None:
    loads: list[tuple[str, str]] = []

    def fake_load(draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        loads.append((draft, target))
        time.sleep(0.05)  # let concurrent first uses overlap
        return engine

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", staticmethod(fake_load))
    llm = SpecGuardLLM(draft="small", target="large")
    assert loads == []
    assert llm.to_payload()["draft"] == "small" and loads == []  # logging a call does not load
    assert llm.metadata.model_name == "specguard:small+large" and loads == []  # nor metadata
    threads = [threading.Thread(target=lambda: llm.engine) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [("small", "large")]
    assert llm.chat(HI).message.content == "Hello there.\n\nThe answer is 7."
    assert loads == [("small", "large")]


def test_constructor_errors() -> None:
    with pytest.raises(ValueError, match="both draft= and target="):
        SpecGuardLLM(draft="a")
    with pytest.raises(ValueError, match="nonsense"):
        SpecGuardLLM(draft="a", target="b", nonsense=1)
    with pytest.raises(ValueError, match="k"):
        SpecGuardLLM(draft="a", target="b", k=0)


def test_the_default_pair_without_loading_it() -> None:
    from specguard_core.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET

    llm = SpecGuardLLM()  # as ChatSpecGuard(): the default pair, loaded on first use
    assert (llm.draft, llm.target) == (DEFAULT_DRAFT, DEFAULT_TARGET)
    assert llm._engine is None and llm.metadata.is_function_calling_model


def test_one_engine_backs_several_adapters(engine: SpecGuardEngine) -> None:
    a, b = SpecGuardLLM(engine=engine), SpecGuardLLM(engine=engine, max_tokens=5)
    assert a.engine is b.engine
    assert a.chat(HI).message.content == "Hello there.\n\nThe answer is 7."
    assert b.chat(HI).raw["finish_reason"] == "length"
    lc = pytest.importorskip("specguard_integrations.langchain")
    chat_model = lc.ChatSpecGuard(engine=engine)
    assert chat_model.invoke("hi").content == a.chat(HI).message.content


# ---- chat ----------------------------------------------------------------------------------------
def test_chat_returns_answer_reasoning_usage_and_trace(llm: SpecGuardLLM) -> None:
    out = llm.chat(HI)
    assert out.message.role == "assistant"
    assert out.message.content == "Hello there.\n\nThe answer is 7."
    thinking = [b for b in out.message.blocks if isinstance(b, ThinkingBlock)]
    assert [b.content for b in thinking] == ["A simple greeting.\n\nNo tools needed."]
    result = llm.engine.generate(to_engine_messages(HI))
    assert out.raw["usage"] == {"prompt_tokens": result.usage.prompt_tokens,
                                "completion_tokens": result.usage.completion_tokens,
                                "total_tokens": result.usage.total_tokens}
    assert out.raw["finish_reason"] == "stop"
    trace = out.additional_kwargs["specguard"]
    assert len(trace["steps"]) == len(result.steps)
    assert {"source", "kind", "score", "accepted", "latency_s"} <= set(trace["steps"][0])
    assert 0.0 <= trace["stats"]["acceptance_rate"] <= 1.0
    assert trace["model"] == "specguard-scripted"


def test_per_call_options_and_unknown_options(llm: SpecGuardLLM) -> None:
    out = llm.chat(HI, max_new_tokens=4)
    assert out.raw["finish_reason"] == "length"
    assert out.raw["usage"]["completion_tokens"] <= 4 + 8  # a step may finish its last token run
    stopped = llm.chat([ChatMessage(role="user", content="repeat: alpha beta. gamma")],
                       stop=("gamma",))
    assert stopped.message.content == "alpha beta. "  # before a stop string: as written (vLLM)
    with pytest.raises(ValueError, match="unknown option.*temprature"):
        llm.chat(HI, temprature=0.1)


def test_input_errors_are_eager(llm: SpecGuardLLM) -> None:
    with pytest.raises(InputError, match="OpenAI-style function tool"):
        llm.stream_chat(HI, tools=[{"type": "function", "function": {"no": "name"}}])
    with pytest.raises(InputError, match="not among the tools"):
        asyncio.run(llm.astream_chat(HI, tools=[WEATHER.metadata.to_openai_tool()],
                                     tool_choice="nope"))
    image = ChatMessage(role="user", blocks=[TextBlock(text="what is this?"),
                                             ImageBlock(url="https://example.com/a.png")])
    with pytest.raises(ValueError, match="text only"):
        llm.chat([image])


# ---- streaming -----------------------------------------------------------------------------------
def test_stream_chat_one_chunk_per_step(llm: SpecGuardLLM) -> None:
    chunks = list(llm.stream_chat(HI))
    final = llm.chat(HI)
    steps = final.additional_kwargs["specguard"]["steps"]
    assert len(chunks) == len(steps)
    assert [c.additional_kwargs["specguard_step"]["text"] for c in chunks] == \
        [s["text"] for s in steps]
    assert "".join(c.delta or "" for c in chunks).strip() == final.message.content
    thinking = "".join(c.additional_kwargs["thinking_delta"] or "" for c in chunks)
    assert thinking.strip() == "A simple greeting.\n\nNo tools needed."
    contents = [c.message.content for c in chunks]
    assert contents[-1] == final.message.content
    assert all(final.message.content.startswith(c or "") for c in contents)
    completions = [c.raw["usage"]["completion_tokens"] for c in chunks]
    assert completions == sorted(completions)
    assert chunks[-1].raw == final.raw  # the last chunk is completed with the finished call
    assert chunks[-1].additional_kwargs["specguard"]["finish_reason"] == "stop"


def test_stream_complete_and_complete(llm: SpecGuardLLM) -> None:
    assert llm.complete("hi").text == "Hello there.\n\nThe answer is 7."
    parts = list(llm.stream_complete("hi"))
    assert "".join(p.delta or "" for p in parts).strip() == "Hello there.\n\nThe answer is 7."
    assert parts[-1].text == "Hello there.\n\nThe answer is 7."
    assert parts[-1].raw["usage"]["total_tokens"] > 0


def test_token_counting_handler_reads_usage(engine: SpecGuardEngine) -> None:
    counter = TokenCountingHandler(tokenizer=engine.tokenizer.encode)
    llm = SpecGuardLLM(engine=engine, callback_manager=CallbackManager([counter]))
    out = llm.chat(HI)
    usage = out.raw["usage"]
    assert counter.prompt_llm_token_count == usage["prompt_tokens"]
    assert counter.completion_llm_token_count == usage["completion_tokens"]
    counter.reset_counts()
    list(llm.stream_chat(HI))
    assert counter.total_llm_token_count == usage["total_tokens"]


def _counting_engine(**config: Any) -> tuple[SpecGuardEngine, list[int]]:
    calls = [0]

    def target(prompt: str) -> str:
        calls[0] += 1
        time.sleep(0.001)
        return respond(prompt)

    return make_engine(target, target, **config), calls


def _engine_is_free(engine: SpecGuardEngine) -> bool:
    done = threading.Event()

    def follow_up() -> None:
        engine.generate("hi")
        done.set()

    threading.Thread(target=follow_up, daemon=True).start()
    return done.wait(10)


def test_abandoned_stream_stops_generation() -> None:
    engine, calls = _counting_engine(max_new_tokens=2000)
    llm = SpecGuardLLM(engine=engine)
    gen = llm.stream_chat([ChatMessage(role="user", content="count to 60")])
    first = next(gen)
    assert first.delta == "Step 1.\n\n"
    gen.close()
    seen = calls[0]
    assert _engine_is_free(engine)
    time.sleep(0.2)
    assert calls[0] - seen < 80  # only the follow-up "hi" ran, not the rest of the count
    full = llm.chat([ChatMessage(role="user", content="count to 60")])
    assert len(full.additional_kwargs["specguard"]["steps"]) == 60


# ---- async ---------------------------------------------------------------------------------------
def test_achat_and_astream_chat_match_sync(llm: SpecGuardLLM) -> None:
    async def run() -> tuple[ChatResponse, list[ChatResponse], Any, Any]:
        out = await llm.achat(HI)
        chunks = [c async for c in await llm.astream_chat(HI)]
        done = await llm.acomplete("hi")
        parts = [p async for p in await llm.astream_complete("hi")]
        return out, chunks, done, parts

    out, chunks, done, parts = asyncio.run(run())
    sync = llm.chat(HI)
    assert out.message.content == sync.message.content == done.text
    assert out.raw == sync.raw
    assert [c.delta for c in chunks] == [c.delta for c in llm.stream_chat(HI)]
    assert chunks[-1].message.content == sync.message.content
    assert "".join(p.delta or "" for p in parts).strip() == sync.message.content


def test_async_does_not_block_the_event_loop() -> None:
    engine, _ = _counting_engine(max_new_tokens=2000)
    llm = SpecGuardLLM(engine=engine)

    async def run() -> tuple[float, int, int]:
        ticks, gaps, stop = 0, [0.0], asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last, ticks = now, ticks + 1

        task = asyncio.create_task(ticker())
        out = await llm.achat([ChatMessage(role="user", content="count to 30")])
        n_chunks = len([c async for c in await llm.astream_chat(
            [ChatMessage(role="user", content="count to 30")])])
        stop.set()
        await task
        assert len(out.additional_kwargs["specguard"]["steps"]) == 30
        return max(gaps), ticks, n_chunks

    max_gap, ticks, n_chunks = asyncio.run(run())
    assert n_chunks == 30
    assert ticks > 20
    assert max_gap < 0.25


def test_abandoned_async_stream_stops_generation() -> None:
    engine, calls = _counting_engine(max_new_tokens=2000)
    llm = SpecGuardLLM(engine=engine)

    async def run() -> int:
        gen = await llm.astream_chat([ChatMessage(role="user", content="count to 60")])
        async for chunk in gen:
            assert chunk.delta == "Step 1.\n\n"
            break
        await gen.aclose()
        await asyncio.sleep(0.3)
        return calls[0]

    seen = asyncio.run(run())
    assert _engine_is_free(engine)
    time.sleep(0.2)
    assert calls[0] - seen < 80
    assert not [t for t in threading.enumerate() if t.name == "specguard-llama-index"]


def test_cancelled_achat_frees_the_engine() -> None:
    engine, _ = _counting_engine(max_new_tokens=2000)
    llm = SpecGuardLLM(engine=engine)

    async def run() -> None:
        task = asyncio.create_task(llm.achat([ChatMessage(role="user", content="count to 60")]))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert _engine_is_free(engine)


# ---- tools ---------------------------------------------------------------------------------------
def test_prepare_chat_with_tools(llm: SpecGuardLLM) -> None:
    history = [ChatMessage(role="system", content="be brief")]
    kwargs = llm._prepare_chat_with_tools([WEATHER], user_msg="weather?", chat_history=history)
    assert [m.content for m in kwargs["messages"]] == ["be brief", "weather?"]
    assert len(history) == 1  # the caller's history is not mutated
    assert kwargs["tools"] == [WEATHER.metadata.to_openai_tool(skip_length_check=True)]
    assert kwargs["tool_choice"] == "auto"
    assert llm._prepare_chat_with_tools([WEATHER], tool_required=True)["tool_choice"] == "required"
    named = llm._prepare_chat_with_tools([WEATHER], tool_required=True, tool_choice="get_weather")
    assert named["tool_choice"] == "get_weather"
    assert llm._prepare_chat_with_tools([], user_msg="x")["tools"] is None


def test_chat_with_tools_returns_verified_tool_call(llm: SpecGuardLLM) -> None:
    out = llm.chat_with_tools([WEATHER], user_msg="What is the weather in 'Paris'?")
    assert out.message.content == "Let me use a tool."
    blocks = [b for b in out.message.blocks if isinstance(b, ToolCallBlock)]
    assert [(b.tool_name, b.tool_kwargs) for b in blocks] == [("get_weather", {"city": "Paris"})]
    assert out.message.additional_kwargs["tool_calls"] == [{  # the legacy (OpenAI) form too
        "id": blocks[0].tool_call_id, "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]
    assert to_engine_messages([out.message])[0]["tool_calls"] == [{
        "id": blocks[0].tool_call_id, "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]  # not twice
    (selection,) = llm.get_tool_calls_from_response(out)
    assert selection.tool_id == blocks[0].tool_call_id and selection.tool_id.startswith("call_")
    assert (selection.tool_name, selection.tool_kwargs) == ("get_weather", {"city": "Paris"})
    steps = out.additional_kwargs["specguard"]["steps"]
    call_step = next(s for s in steps if s["kind"] == "tool_call")
    assert call_step["source"] == "target" and call_step["rejected_reason"]  # weak draft fixed
    assert (out.raw or {})["finish_reason"] == "tool_calls"


def test_stream_chat_with_tools_yields_tool_call_blocks(llm: SpecGuardLLM) -> None:
    chunks = list(llm.stream_chat_with_tools([WEATHER], user_msg="Weather in 'Oslo'?"))
    calls = llm.get_tool_calls_from_response(chunks[-1])
    assert [(c.tool_name, c.tool_kwargs) for c in calls] == [("get_weather", {"city": "Oslo"})]
    assert chunks[0].delta == "Let me use a tool.\n\n"
    assert llm.get_tool_calls_from_response(chunks[0], error_on_no_tool_call=False) == []


def test_tool_required_forces_a_call() -> None:
    def no_tool(prompt: str) -> str:
        return "No tool needed." if "<tools>" in prompt else respond(prompt)

    # typical actions: the draft's answer stands where the target would call (exact actions would
    # write the target's call: tests/specguard_core/engine/test_actions.py)
    llm = SpecGuardLLM(engine=make_engine(respond, no_tool, action_acceptance="typical"))
    free = llm.chat_with_tools([WEATHER], user_msg="Weather in 'Rome'?")
    assert free.message.content == "No tool needed."
    assert llm.get_tool_calls_from_response(free, error_on_no_tool_call=False) == []
    with pytest.raises(ValueError, match="at least one tool call"):
        llm.get_tool_calls_from_response(free)
    forced = llm.chat_with_tools([WEATHER], user_msg="Weather in 'Rome'?", tool_required=True)
    assert [c.tool_kwargs for c in llm.get_tool_calls_from_response(forced)] == [{"city": "Rome"}]
    assert (forced.raw or {})["finish_reason"] == "tool_calls"


def test_chat_with_tools_without_parallel_calls_ends_with_the_first_call() -> None:
    two = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
           '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>')
    llm = SpecGuardLLM(engine=make_engine(lambda p: two, lambda p: two))
    outs = {allow: llm.chat_with_tools([WEATHER], user_msg="Paris and Rome?",
                                       allow_parallel_tool_calls=allow) for allow in (True, False)}
    cities = {allow: [c.tool_kwargs["city"] for c in llm.get_tool_calls_from_response(out)]
              for allow, out in outs.items()}
    assert cities == {True: ["Paris", "Rome"], False: ["Paris"]}
    steps = {allow: [s["kind"] for s in out.additional_kwargs["specguard"]["steps"]]
             for allow, out in outs.items()}
    assert steps[False] == ["tool_call"] and steps[True].count("tool_call") == 2


def test_validate_keeps_one_call_unless_parallel(llm: SpecGuardLLM) -> None:
    def response() -> ChatResponse:
        blocks = [TextBlock(text="two calls"),
                  ToolCallBlock(tool_call_id="a", tool_name="f", tool_kwargs={"x": 1}),
                  ToolCallBlock(tool_call_id="b", tool_name="g", tool_kwargs={})]
        legacy = {"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}},
                                 {"id": "b", "function": {"name": "g", "arguments": "{}"}}]}
        message = ChatMessage(role="assistant", blocks=blocks, additional_kwargs=legacy)
        return ChatResponse(message=message)

    single = llm._validate_chat_with_tools_response(response(), [WEATHER])
    assert [c.tool_id for c in llm.get_tool_calls_from_response(single)] == ["a"]
    assert [c["id"] for c in single.message.additional_kwargs["tool_calls"]] == ["a"]
    both = llm._validate_chat_with_tools_response(response(), [WEATHER],
                                                  allow_parallel_tool_calls=True)
    assert [c.tool_id for c in llm.get_tool_calls_from_response(both)] == ["a", "b"]


class _OpenAIFunction(BaseModel):
    name: str
    arguments: str


class _OpenAIToolCall(BaseModel):  # the shape of openai's ChatCompletionMessageToolCall
    id: str
    type: str = "function"
    function: _OpenAIFunction


def test_tool_calls_from_legacy_additional_kwargs(llm: SpecGuardLLM) -> None:
    legacy = ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        _OpenAIToolCall(id="c2", function=_OpenAIFunction(name="get_weather",
                                                          arguments='{"city": "Rome"}')),
        {"name": "get_weather", "arguments": {"city": "Oslo"}},
    ]})
    selections = llm.get_tool_calls_from_response(ChatResponse(message=legacy))
    assert [(s.tool_id, s.tool_kwargs) for s in selections] == [
        ("c1", {"city": "Paris"}), ("c2", {"city": "Rome"}), ("get_weather", {"city": "Oslo"})]
    bad = ChatMessage(role="assistant", additional_kwargs={"tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": "{not json"}}]})
    with pytest.raises(ValueError, match="not JSON"):
        tool_selections(bad)


def _tool_history() -> list[ChatMessage]:
    return [
        ChatMessage(role="user", content="What is the weather in 'Paris'?"),
        ChatMessage(role="assistant", blocks=[
            ThinkingBlock(content="the user wants weather"), TextBlock(text="Let me check."),
            ToolCallBlock(tool_call_id="call_1", tool_name="get_weather",
                          tool_kwargs={"city": "Paris"})]),
        ChatMessage(role="tool", content="sunny, 24 C", additional_kwargs={"tool_call_id": "call_1"}),
    ]


def test_tool_messages_render_with_their_call_ids() -> None:
    prompts: list[str] = []

    def target(prompt: str) -> str:
        prompts.append(prompt)
        return respond(prompt)

    llm = SpecGuardLLM(engine=make_engine(target, target))
    history = _tool_history()
    assert to_engine_messages(history) == [
        {"role": "user", "content": "What is the weather in 'Paris'?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny, 24 C", "tool_call_id": "call_1"},
    ]
    out = llm.chat_with_tools([WEATHER], chat_history=history)
    assert out.message.content == "The tool says sunny, 24 C.\n\nDone."
    prompt = prompts[-1]
    assert ('assistant\nLet me check.<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Paris"}}\n</tool_call>') in prompt
    assert "<tool_response>\nsunny, 24 C\n</tool_response>" in prompt
    assert "the user wants weather" not in prompt  # reasoning is not sent back


def test_legacy_history_renders_like_blocks() -> None:
    blocks = to_engine_messages(_tool_history())
    legacy = _tool_history()
    legacy[1] = ChatMessage(role="assistant", content="Let me check.", additional_kwargs={
        "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]})
    assert to_engine_messages(legacy) == blocks


def test_weak_draft_script_is_what_the_tests_assume() -> None:
    prompt = "<|im_start|>user\nWeather in 'Oslo'?<|im_end|>\n<|im_start|>assistant\n"
    assert weak_draft(prompt) == GREETING
    assert tool_call("f", {}) in weak_draft(
        prompt.replace("<|im_start|>user", '<tools>\n{"type": "function", "function": {"name": '
                       '"f", "parameters": {}}}\n</tools><|im_start|>user'))
