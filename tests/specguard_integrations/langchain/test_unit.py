"""ChatSpecGuard's own contract, beyond the standard suites: real engines over scripted models."""

from __future__ import annotations

import ast
import asyncio
import json
import threading
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.load import dumps
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from pydantic import BaseModel, Field

from specguard_core import SpecGuardConfig, SpecGuardEngine
from specguard_core.config import PRESETS
from specguard_core.testing import build_tokenizer, scripted_engine
from specguard_integrations.langchain import (
    ChatSpecGuard,
    normalise_tool_choice,
    to_engine_message,
)
from tests.specguard_integrations.langchain.helpers import (
    draft_respond,
    make_engine,
    respond,
    shared_engine,
)

ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                    "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
OTHER = {"type": "function", "function": {"name": "other", "parameters": {}}}
LONG = "\n\n".join(f"Step {i} of the work." for i in range(30))


def chat(engine: SpecGuardEngine | None = None, **kwargs: Any) -> ChatSpecGuard:
    return ChatSpecGuard(engine=engine or shared_engine(), temperature=0, **kwargs)


def counting_engine(reply: str, delay: float = 0.0) -> tuple[SpecGuardEngine, list[int]]:
    """An engine whose models always write `reply`; the list counts responder calls (tokens)."""
    calls = [0]

    def responder(prompt: str) -> str:
        calls[0] += 1
        time.sleep(delay)
        return reply

    cfg = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=400, max_steps=64)
    return scripted_engine(responder, config=cfg), calls


def engine_is_free(engine: SpecGuardEngine, timeout: float = 10.0) -> bool:
    """True once a new (one-token) request gets through: the previous one released the engine."""
    done = threading.Event()

    def request() -> None:
        engine.generate("Hello", max_new_tokens=1)
        done.set()

    worker = threading.Thread(target=request, daemon=True)
    worker.start()
    return done.wait(timeout)


# ---- packaging and construction ---------------------------------------------------------------
def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_core_never_imports_langchain_and_the_adapter_is_lazy() -> None:
    root = Path(__file__).resolve().parents[3]
    core = {p.name: _imports(p) & {"langchain", "langchain_core"}
            for p in (root / "specguard_core").glob("*.py")}
    assert not any(core.values()), core
    package = ast.parse((root / "specguard_integrations" / "__init__.py").read_text())
    top_level = {n.module for n in package.body if isinstance(n, ast.ImportFrom)}
    assert top_level <= {"__future__", "typing"}


def test_serialised_ids_name_the_public_path() -> None:
    public = ["specguard_integrations", "langchain", "ChatSpecGuard"]
    model = ChatSpecGuard(engine=shared_engine())
    assert ChatSpecGuard.lc_id() == public
    assert json.loads(dumps(model))["id"] == public
    bound = json.loads(dumps(model.bind_tools([])))
    assert bound["kwargs"]["bound"]["id"] == public

    class Mine(ChatSpecGuard):
        pass

    assert Mine.lc_id() == [*__name__.split("."), "Mine"]
    assert json.loads(dumps(Mine(engine=shared_engine())))["id"] == Mine.lc_id()


def test_construction_is_cheap_and_the_pair_loads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[tuple[str, str, dict[str, Any]]] = []

    def fake_load(cls: type, draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        loads.append((draft, target, kwargs))
        time.sleep(0.05)  # let the batch's threads race for the first load
        return shared_engine()

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(fake_load))
    model = ChatSpecGuard(model="org/target", draft="org/draft", dtype="float32",
                          temperature=0)
    assert loads == []
    assert all(m.content for m in model.batch(["Hello", "Hey", "Hi"]))
    assert [(d, t, kw["load"].dtype) for d, t, kw in loads] == [("org/draft", "org/target",
                                                               "float32")]
    default = ChatSpecGuard()
    assert (default.model, default.draft) == ("Qwen/Qwen2.5-Coder-1.5B-Instruct",
                                              "Qwen/Qwen2.5-Coder-0.5B-Instruct")


@pytest.mark.parametrize("kwargs", [
    {"preset": "nope"}, {"preset": "fast", "config": SpecGuardConfig()}, {"k": 0},
    {"model_kwargs": {"k": 1}}, {"max_new_tokens": 5},
])
def test_bad_settings_fail_at_construction(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ChatSpecGuard(engine=shared_engine(), **kwargs)
    with pytest.raises(ValueError, match="draft="):
        ChatSpecGuard(model="org/target")


def test_bad_calls_fail_clearly() -> None:
    with pytest.raises(ValueError, match="unknown keyword"):
        chat().invoke("Hello", temprature=0.2)
    with pytest.raises(ValueError, match="cannot be switched per call"):
        chat().invoke("Hello", model="someone/else")
    with pytest.raises(ValueError, match="text only"):
        chat().invoke([HumanMessage([{"type": "image_url", "image_url": {"url": "x"}}])])


def test_settings_reach_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine()
    seen: list[dict[str, Any]] = []
    real_stream = engine.stream

    def spy(messages: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return real_stream(messages, **kwargs)

    monkeypatch.setattr(engine, "stream", spy)
    model = ChatSpecGuard(engine=engine, preset="fast", temperature=0, max_tokens=50,
                          stop=["zzz"], tau=0.5)
    model.invoke("Hello", k=3, max_step_tokens=64)
    forced = ChatSpecGuard(engine=engine, temperature=0)
    forced.bind_tools([ADD, OTHER], tool_choice={"type": "function",
                                                 "function": {"name": "add"}}).invoke("Hello")
    first, second = seen
    cfg = first["config"]  # one typed SpecGuardConfig per call, not a dict of keywords
    assert isinstance(cfg, SpecGuardConfig) and set(first) == {
        "tools", "tool_choice", "response_format", "config", "timeout", "parallel_tool_calls",
        "top_logprobs"}
    assert first["parallel_tool_calls"] is True  # unset: several calls may come back
    assert {key: getattr(cfg, key) for key in ("k", "temperature", "max_new_tokens", "stop", "tau",
                                               "max_step_tokens", "fallback")} == {
        "k": 3, "temperature": 0, "max_new_tokens": 50, "stop": ("zzz",), "tau": 0.5,
        "max_step_tokens": 64, "fallback": PRESETS["fast"]["fallback"]}
    assert (first["tool_choice"], first["tools"]) == ("auto", [])
    assert second["tool_choice"] == "add" and [t["function"]["name"] for t in second["tools"]] \
        == ["add", "other"]


def test_k_above_one_after_a_regenerated_tool_call() -> None:
    message = chat(k=2).bind_tools([ADD]).invoke("Use add on 3 and 4")
    assert [c["args"] for c in message.tool_calls] == [{"a": 3, "b": 4}]


# ---- streaming, trace, reasoning ---------------------------------------------------------------
def test_one_chunk_per_committed_step_then_a_last_chunk() -> None:
    model = chat()
    chunks = list(model.stream("What is 3 + 4?"))
    message = model.invoke("What is 3 + 4?")
    steps = message.response_metadata["specguard_steps"]
    assert len(chunks) == len(steps) + 1 and len(steps) >= 2
    for chunk, step in zip(chunks[:-1], steps, strict=True):
        (trace,) = chunk.response_metadata["specguard_steps"]
        assert (trace["index"], trace["source"], trace["kind"]) == (step["index"], step["source"],
                                                                    step["kind"])
        assert {"confidence", "grounding", "score", "accepted", "tokens"} <= set(trace)
        assert chunk.chunk_position is None and chunk.usage_metadata is None
    last = chunks[-1]
    assert last.chunk_position == "last" and last.content == ""
    assert last.response_metadata["finish_reason"] == "stop"
    assert last.response_metadata["model_name"] == shared_engine().model_name
    assert last.usage_metadata and last.usage_metadata["output_tokens"] > 0
    assert message.content == "".join(str(c.content) for c in chunks).strip() \
        == "3 + 4 = 7.\n\nThe answer is 7."
    run = message.response_metadata["specguard"]
    assert run["acceptance_rate"] == 1.0 and run["target_token_fraction"] == 0.0
    assert message.usage_metadata == last.usage_metadata


def test_the_trace_shows_rejected_draft_steps() -> None:
    message = chat().bind_tools([ADD]).invoke("Use add on 3 and 4")
    first = message.response_metadata["specguard_steps"][0]
    assert (first["source"], first["kind"], first["accepted"]) == ("target", "tool_call", False)
    assert "required property" in first["rejected_reason"]
    assert first["draft_text"] and '"arguments": {}' in first["draft_text"]
    assert message.response_metadata["specguard"]["target_token_fraction"] > 0


def test_reasoning_goes_to_reasoning_content_never_content() -> None:
    model = chat()
    message = model.invoke("Hello")
    assert message.content == "Hello! How can I help you today?"
    assert message.additional_kwargs["reasoning_content"] == "The user greets me."
    assert message.usage_metadata and message.usage_metadata["output_token_details"]["reasoning"]
    chunks = list(model.stream("Hello"))
    assert "<think>" not in "".join(str(c.content) for c in chunks)
    full = sum(chunks[1:], chunks[0])
    assert full.additional_kwargs["reasoning_content"].strip() == "The user greets me."
    assert [b["type"] for b in full.content_blocks] == ["reasoning", "text"]


def test_stop_strings_cut_the_answer_in_invoke_and_stream() -> None:
    model = chat(stop=["answer"])
    assert model.invoke("What is 3 + 4?").content == "3 + 4 = 7.\n\nThe "  # as vLLM keeps it
    assert "".join(str(c.content) for c in model.stream("What is 3 + 4?")) == \
        "3 + 4 = 7.\n\nThe "
    assert chat().invoke("What is 3 + 4?", stop=["="]).content == "3 + 4 "


class _Tokens(BaseCallbackHandler):
    def __init__(self) -> None:
        self.tokens: list[Any] = []

    def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        self.tokens.append(token)


def test_token_callbacks_fire_once_per_chunk() -> None:
    """As ChatOllama does, `invoke` fires `on_llm_new_token` once per committed
    step (and once for the last chunk), exactly as streaming does, without `streaming=True`."""
    streamed = _Tokens()
    chunks = list(chat().stream("Hello", config={"callbacks": [streamed]}))
    assert len(streamed.tokens) == len(chunks) >= 3
    invoked = _Tokens()
    chat().invoke("Hello", config={"callbacks": [invoked]})
    assert invoked.tokens == streamed.tokens
    ainvoked = _Tokens()
    asyncio.run(chat().ainvoke("Hello", config={"callbacks": [ainvoked]}))
    assert ainvoked.tokens == streamed.tokens
    streaming = _Tokens()
    chat(streaming=True).invoke("Hello", config={"callbacks": [streaming]})
    assert streaming.tokens == streamed.tokens


# ---- tools ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("choice", "expected"), [
    (None, "auto"), ("auto", "auto"), (False, "auto"), ({"type": "auto"}, "auto"),
    ("none", "none"), ("any", "required"), ("required", "required"), (True, "required"),
    ({"type": "any"}, "required"), ("add", "add"),
    ({"type": "function", "function": {"name": "add"}}, "add"), ({"type": "tool", "name": "add"},
                                                                 "add"),
])
def test_every_tool_choice_form(choice: Any, expected: str) -> None:
    assert normalise_tool_choice(choice, [ADD, OTHER]) == expected


def test_unknown_tool_choice_fails_at_bind_time() -> None:
    with pytest.raises(ValueError, match="not among the bound tools"):
        chat().bind_tools([ADD], tool_choice="multiply")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_tool_calls_come_back_with_ids_and_stream_as_tool_call_chunks() -> None:
    bound = chat().bind_tools([add])
    message = bound.invoke("Use add on 3 and 4")
    assert isinstance(message, AIMessage) and message.content == ""
    (call,) = message.tool_calls
    assert (call["name"], call["args"]) == ("add", {"a": 3, "b": 4})
    assert call["id"] and call["id"].startswith("call_")
    assert message.response_metadata["finish_reason"] == "tool_calls"
    chunks = [cast(AIMessageChunk, c) for c in bound.stream("Use add on 3 and 4")]
    (with_call,) = [c for c in chunks if c.tool_call_chunks]
    (piece,) = with_call.tool_call_chunks
    assert (piece["name"], piece["index"], json.loads(piece["args"] or "")) == ("add", 0,
                                                                                {"a": 3, "b": 4})
    full = sum(chunks[1:], chunks[0])
    assert [(c["name"], c["args"]) for c in full.tool_calls] == [("add", {"a": 3, "b": 4})]


def test_a_call_that_names_a_tool_is_a_tool_call_with_its_error_kept() -> None:
    bad = '<tool_call>\n{"name": "add", "arguments": {"a": "three"}}\n</tool_call>'
    engine, _ = counting_engine(bad)
    bound = chat(engine).bind_tools([ADD])
    message = bound.invoke("Add three and four")
    assert message.invalid_tool_calls == []
    (call,) = message.tool_calls  # as ChatOpenAI returns it: the tool node answers the error
    assert (call["name"], call["args"]) == ("add", {"a": "three"})
    errors = message.response_metadata["specguard_tool_call_errors"]
    assert list(errors) == [call["id"]] and "arguments invalid" in errors[call["id"]]
    chunks = list(bound.stream("Add three and four"))
    full = sum(chunks[1:], chunks[0])
    assert full.invalid_tool_calls == []
    assert [(c["name"], c["args"]) for c in full.tool_calls] == [("add", {"a": "three"})]
    assert "arguments invalid" in next(iter(full.response_metadata[
        "specguard_tool_call_errors"].values()))


def test_only_calls_that_do_not_parse_are_invalid_tool_calls() -> None:
    bad = '<tool_call>\n{"name": "add", "arguments": {"a": 3,\n</tool_call>'
    engine, _ = counting_engine(bad)
    bound = chat(engine).bind_tools([ADD])
    message = bound.invoke("Add three and four")
    assert message.tool_calls == []
    (invalid,) = message.invalid_tool_calls
    assert "unparseable" in (invalid["error"] or "") and invalid["args"] == bad
    chunks = list(bound.stream("Add three and four"))
    full = sum(chunks[1:], chunks[0])
    assert full.tool_calls == [] and len(full.invalid_tool_calls) == 1


# ---- message conversion -----------------------------------------------------------------------
HISTORY: list[BaseMessage] = [
    SystemMessage("Be brief."),
    SystemMessage("Use the tools."),
    HumanMessage([{"type": "text", "text": "What is "}, {"type": "text", "text": "3 + 4?"}]),
    HumanMessage("Please."),
    AIMessage([{"type": "text", "text": "Let me add."},
               {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 3, "b": 4}}],
              tool_calls=[{"name": "add", "args": {"a": 3, "b": 4}, "id": "c1"}]),
    ToolMessage("7", tool_call_id="c1", name="add"),
    AIMessage("It is 7.", additional_kwargs={"reasoning_content": "old thoughts"}),
    AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1}, "id": "c2"}]),
    ToolMessage("missing b", tool_call_id="c2", name="add", status="error"),
]


def test_the_whole_agent_history_converts() -> None:
    assert [to_engine_message(m) for m in HISTORY] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "What is 3 + 4?"},
        {"role": "user", "content": "Please."},
        {"role": "assistant", "content": "Let me add.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add",
                                                          "arguments": {"a": 3, "b": 4}}}]},
        {"role": "tool", "content": "7", "tool_call_id": "c1", "name": "add"},
        {"role": "assistant", "content": "It is 7."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}]},
        {"role": "tool", "content": "Error: missing b", "tool_call_id": "c2", "name": "add"},
    ]


def test_any_last_message_works_and_tool_status_reaches_the_model() -> None:
    model = chat().bind_tools([ADD])
    after_error = model.invoke(HISTORY)
    assert after_error.content == ("The tool returned Error: missing b.\n\nSo the answer is "
                                   "Error: missing b.")
    # ends with an AI message with text: the reply continues it (a prefill), here at its end
    assert isinstance(chat().invoke(HISTORY[:7]), AIMessage)
    assert chat().invoke([SystemMessage("Only a system message: hello")]).content


# ---- structured output ------------------------------------------------------------------------
class Person(BaseModel):
    """A person."""

    name: str = Field(description="the name")
    age: int = Field(description="age in years")


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_structured_output_with_a_pydantic_schema(method: str) -> None:
    structured = chat().with_structured_output(Person, method=method)  # type: ignore[arg-type]
    assert structured.invoke("The person is 'Ada', aged 36.") == Person(name="Ada", age=36)
    assert list(structured.stream("The person is 'Ada', aged 36."))[-1] == Person(name="Ada",
                                                                                   age=36)


def test_structured_output_with_dicts_json_mode_and_raw() -> None:
    schema = Person.model_json_schema()
    as_dict = chat().with_structured_output(schema).invoke("The person is 'Ada', aged 36.")
    assert as_dict == {"name": "Ada", "age": 36}
    json_mode = chat().with_structured_output(None, method="json_mode")
    assert json_mode.invoke("Return JSON with 'name' and 'age'.") == {"name": "the name",
                                                                      "age": "the age"}
    raw = chat().with_structured_output(Person, include_raw=True).invoke("'Ada' is 36.")
    assert isinstance(raw, dict) and raw["parsed"] == Person(name="Ada", age=36)
    assert isinstance(raw["raw"], AIMessage) and raw["parsing_error"] is None


# ---- tokens -----------------------------------------------------------------------------------
def test_token_counts_use_the_local_tokenizer(tmp_path: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    engine = shared_engine()
    text = "The answer is 42."
    assert chat().get_token_ids(text) == engine.tokenizer(text, add_special_tokens=False)[
        "input_ids"]
    messages = [SystemMessage("Be brief."), HumanMessage("What is 3 + 4?")]
    assert chat().get_num_tokens_from_messages(messages, tools=[ADD]) == len(engine.prompt_ids(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 3 + 4?"}],
        tools=[ADD]))

    def no_weights(*args: Any, **kwargs: Any) -> SpecGuardEngine:
        raise AssertionError("token counting must not load the models")

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(no_weights))
    tokenizer = build_tokenizer(tmp_path)
    lazy = ChatSpecGuard(target=str(tmp_path), draft=str(tmp_path))
    assert lazy.get_token_ids(text) == tokenizer(text, add_special_tokens=False)["input_ids"]


# ---- async, cancellation, timeouts ------------------------------------------------------------
def test_async_generation_never_blocks_the_event_loop() -> None:
    engine, _ = counting_engine("\n\n".join(f"Step {i}." for i in range(8)), delay=0.003)

    async def main() -> tuple[int, float, str]:
        gaps: list[float] = []
        running = True

        async def ticker() -> None:
            last = time.perf_counter()
            while running:
                await asyncio.sleep(0.002)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        task = asyncio.create_task(ticker())
        message = await chat(engine).ainvoke("go")
        running = False
        await task
        return len(gaps), max(gaps), str(message.content)

    ticks, worst_gap, content = asyncio.run(main())
    assert content.startswith("Step 0.") and content.endswith("Step 7.")
    assert ticks >= 10 and worst_gap < 0.5


def test_closing_an_async_stream_early_stops_and_frees_the_engine() -> None:
    engine, calls = counting_engine(LONG, delay=0.002)

    async def main() -> AIMessageChunk:
        stream = cast(AsyncGenerator[AIMessageChunk, None], chat(engine).astream("go"))
        first = await stream.__anext__()
        await stream.aclose()
        return first

    first = asyncio.run(main())
    assert first.content == "Step 0 of the work.\n\n"
    assert engine_is_free(engine)
    stopped_at = calls[0]
    full_calls = counting_engine(LONG)
    full_calls[0].generate("go")
    assert stopped_at < full_calls[1][0] / 2


def test_leaving_a_sync_stream_early_stops_and_frees_the_engine() -> None:
    engine, calls = counting_engine(LONG)
    for chunk in chat(engine).stream("go"):
        assert chunk.content == "Step 0 of the work.\n\n"
        break
    after_break = calls[0]
    assert engine_is_free(engine, timeout=2.0)
    assert after_break < 40


def test_timeout_stops_generation_and_frees_the_engine() -> None:
    engine, _ = counting_engine(LONG, delay=0.002)
    with pytest.raises(TimeoutError):
        chat(engine, timeout=0.05).invoke("go")
    assert engine_is_free(engine)


# ---- concurrency ------------------------------------------------------------------------------
def _summary(message: BaseMessage) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    assert isinstance(message, AIMessage)
    return str(message.content), [(c["name"], c["args"]) for c in message.tool_calls]


@pytest.mark.parametrize("tools", [[], [ADD]], ids=["answers", "tool-calls"])
def test_batch_and_concurrent_ainvoke_match_serial_runs(tools: list[dict[str, Any]]) -> None:
    model = chat().bind_tools(tools) if tools else chat()
    prompts: list[Any] = [f"What is {i} + {2 * i + 1}?" for i in range(6)]
    prompts += ["Hello, add 20 and 22", "Tell me a story"]
    serial = [_summary(model.invoke(p)) for p in prompts]
    assert len(set(map(str, serial))) == 8
    batched = model.batch(prompts, config={"max_concurrency": 8})
    assert [_summary(m) for m in batched] == serial

    async def gather() -> list[BaseMessage]:
        return await asyncio.gather(*[model.ainvoke(p) for p in prompts])

    assert [_summary(m) for m in asyncio.run(gather())] == serial


def test_the_script_is_deterministic() -> None:
    prompt = "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n"
    assert respond(prompt) == draft_respond(prompt) == "3 + 4 = 7.\n\nThe answer is 7."
