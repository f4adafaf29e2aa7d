"""What LlamaIndex users hit first, on scripted engines: invalid tool calls reach the
agent (which recovers from a misspelt tool), complete() counts tokens once, the constructor
vocabulary shared with ChatSpecGuard, and JSON answers verified against a response format."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.callbacks import CallbackManager, TokenCountingHandler
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMCompletionEndEvent

from specguard_core import LoadOptions, SpecGuardConfig, SpecGuardEngine
from specguard_core.testing import scripted_engine
from specguard_integrations.llama_index import SpecGuardLLM
from tests.fixtures import record_stream_configs

CFG = SpecGuardConfig(k=1, temperature=0.0, max_new_tokens=200)


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def _call(name: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {{"a": 17, "b": 23}}}}\n</tool_call>'


def misspeller(prompt: str) -> str:
    """Misspells the tool on its first try; after the agent's "not found" it calls the right one;
    after the result it answers."""
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.DOTALL)
    if not results:
        return _call("multipy")
    if "not found" in results[-1]:
        return _call("multiply")
    return f"17 times 23 is {results[-1]}."


# ---- item 4: agents see invalid tool calls and recover ------------------------------------------
def test_invalid_calls_are_tool_call_blocks_with_their_raw_name_and_arguments() -> None:
    llm = SpecGuardLLM(engine=scripted_engine(misspeller, config=CFG))
    response = llm.chat_with_tools([_tool()], user_msg="What is 17 times 23?")
    (block,) = [b for b in response.message.blocks if isinstance(b, ToolCallBlock)]
    assert (block.tool_name, block.tool_kwargs) == ("multipy", {"a": 17, "b": 23})
    (bad,) = response.additional_kwargs["specguard"]["invalid_tool_calls"]
    assert "unknown tool 'multipy'" in bad["error"]
    selections = llm.get_tool_calls_from_response(response)
    assert [(s.tool_name, s.tool_kwargs) for s in selections] == [("multipy", {"a": 17, "b": 23})]
    streamed = list(llm.stream_chat_with_tools([_tool()], user_msg="What is 17 times 23?"))
    assert [b.tool_name for b in streamed[-1].message.blocks if isinstance(b, ToolCallBlock)] \
        == ["multipy"]


def _tool() -> Any:
    from llama_index.core.tools import FunctionTool

    return FunctionTool.from_defaults(multiply)


@pytest.mark.parametrize("streaming", [True, False])
def test_function_agent_recovers_from_a_misspelt_tool(streaming: bool) -> None:
    llm = SpecGuardLLM(engine=scripted_engine(misspeller, config=CFG))
    agent = FunctionAgent(tools=[multiply], llm=llm, streaming=streaming)

    async def run() -> tuple[Any, list[ToolCallResult]]:
        handler = agent.run(user_msg="What is 17 times 23?")
        events = [e async for e in handler.stream_events() if isinstance(e, ToolCallResult)]
        return await handler, events

    result, calls = asyncio.run(run())
    assert [c.tool_name for c in calls] == ["multipy", "multiply"]
    assert "not found" in calls[0].tool_output.content and calls[0].tool_output.is_error
    assert calls[1].tool_output.content == "391"
    assert str(result.response.content) == "17 times 23 is 391."


# ---- item 6: complete() is one LLM event and counts its tokens once ----------------------------
class _Events(BaseEventHandler):
    ends: list[str] = []

    @classmethod
    def class_name(cls) -> str:
        return "_Events"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, (LLMChatEndEvent, LLMCompletionEndEvent)):
            self.ends.append(type(event).__name__)


def test_complete_counts_tokens_once() -> None:
    engine = scripted_engine(lambda p: "One.\n\nTwo.\n\nThree.", config=CFG)
    counter = TokenCountingHandler(tokenizer=lambda text: text.split())
    llm = SpecGuardLLM(engine=engine, callback_manager=CallbackManager([counter]))
    tokens = engine.generate([{"role": "user", "content": "Count."}]).usage.completion_tokens
    events = _Events()
    get_dispatcher().add_event_handler(events)
    try:
        for run in (lambda: llm.complete("Count."),
                    lambda: list(llm.stream_complete("Count.")),
                    lambda: asyncio.run(llm.acomplete("Count."))):
            counter.reset_counts()
            events.ends = []
            run()
            assert len(counter.llm_token_counts) == 1  # was 2: complete wrapped a decorated chat
            assert counter.completion_llm_token_count == tokens  # the engine's usage, once
            assert events.ends == ["LLMCompletionEndEvent"]
    finally:
        get_dispatcher().event_handlers.remove(events)


# ---- item 2 and the shared vocabulary -----------------------------------------
def test_knobs_and_presets_reach_the_engine_as_one_config(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = scripted_engine(lambda p: "Hi.", config=CFG)
    seen: list[dict[str, Any]] = []
    real_stream = engine.stream

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return real_stream(*args, **kwargs)

    monkeypatch.setattr(engine, "stream", spy)
    llm = SpecGuardLLM(engine=engine, preset="paper", temperature=0.0, max_tokens=5,
                       stop=["zz"], timeout=30)
    llm.chat([ChatMessage(role="user", content="Hello")], k=2)
    cfg = seen[0]["config"]
    assert isinstance(cfg, SpecGuardConfig)
    assert (cfg.k, cfg.fallback, cfg.temperature, cfg.max_new_tokens, cfg.stop) == (
        2, "sample", 0.0, 5, ("zz",))  # the preset applies with an injected engine too
    assert llm.metadata.num_output == 5


def test_sampling_knobs_reach_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """top_k, min_p, repetition_penalty as fields and per-call options; bad values fail early."""
    engine = scripted_engine(lambda p: "Hi.", config=CFG)
    seen = record_stream_configs(engine, monkeypatch)
    llm = SpecGuardLLM(engine=engine, top_k=40, min_p=0.05, repetition_penalty=1.1)
    llm.chat([ChatMessage(role="user", content="Hello")])
    llm.complete("Hello", top_k=3, repetition_penalty=1.3)
    assert [(c.top_k, c.min_p, c.repetition_penalty) for c in seen] == [(40, 0.05, 1.1),
                                                                          (3, 0.05, 1.3)]
    with pytest.raises(ValueError, match="min_p"):
        SpecGuardLLM(engine=engine, min_p=2.0)


def test_unknown_arguments_say_what_to_pass() -> None:
    engine = scripted_engine(lambda p: "Hi.", config=CFG)
    with pytest.raises(ValueError, match=r"unknown argument\(s\) \['top_a'\].*max_tokens"):
        SpecGuardLLM(engine=engine, top_a=3)
    with pytest.raises(ValueError, match=re.escape("['max_new_tokens'] (max_new_tokens: use "
                                                   "max_tokens=)")):
        SpecGuardLLM(engine=engine, max_new_tokens=4)
    with pytest.raises(ValueError, match=re.escape("(max_step_tokens: pass config=SpecGuardConfig("
                                                   "max_step_tokens=...))")):
        SpecGuardLLM(engine=engine, max_step_tokens=9)
    with pytest.raises(ValueError, match=re.escape("['generate_kwargs']")):
        SpecGuardLLM(engine=engine, generate_kwargs={"max_step_tokens": 9})
    named = SpecGuardLLM(model="org/t", draft="org/d")  # `model` is the target, as in LangChain
    assert (named.draft, named.target) == ("org/d", "org/t")


def test_loader_options_reach_the_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []

    def fake(cls: type, draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        seen.append({"draft": draft, "target": target, **kwargs})
        return scripted_engine(lambda p: "Hi.", config=CFG)

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(fake))
    llm = SpecGuardLLM(draft="org/d", target="org/t", device_map="auto", revision="v1",
                       quantization_config={"load_in_4bit": True}, trust_remote_code=True,
                       target_dtype="bfloat16", draft_device="cpu")
    assert seen == []
    assert llm.complete("Hello").text == "Hi."
    (kw,) = seen
    kw = {**kw, **{k: getattr(kw["load"], k) for k in LoadOptions.model_fields}}
    assert {k: kw[k] for k in ("draft", "target", "device_map", "revision", "quantization_config",
                               "trust_remote_code", "target_dtype", "draft_device")} == {
        "draft": "org/d", "target": "org/t", "device_map": "auto", "revision": "v1",
        "quantization_config": {"load_in_4bit": True}, "trust_remote_code": True,
        "target_dtype": "bfloat16", "draft_device": "cpu"}
    with pytest.raises(ValueError, match=re.escape("draft_dtype='fp32': unknown dtype")):
        SpecGuardLLM(draft="org/d", target="org/t", draft_dtype="fp32")
    one = SpecGuardLLM(draft="org/d", target="org/t", load_options=LoadOptions(
        device_map="auto", revision="v1", quantization_config={"load_in_4bit": True},
        trust_remote_code=True, target_dtype="bfloat16", draft_device="cpu"))
    assert one.loading == kw["load"]  # the same options, given as one LoadOptions
    assert one.complete("Hello").text == "Hi."
    assert len(seen) == 1 and one.engine is llm.engine  # are the pair loaded above
    with pytest.raises(ValueError, match=re.escape("got load_options= and ['device_map']")):
        SpecGuardLLM(draft="org/d", target="org/t", device_map="auto",
                     load_options=LoadOptions())
    served = SpecGuardLLM(draft="org/d", load_options=LoadOptions(target_url="http://h:1/v1"))
    assert served.target == "http://h:1/v1"


def test_step_traces_use_the_one_schema() -> None:
    engine = scripted_engine(lambda p: "One.\n\nTwo.", config=CFG)
    llm = SpecGuardLLM(engine=engine)
    chunks = list(llm.stream_chat([ChatMessage(role="user", content="Count.")]))
    steps = [c.additional_kwargs["specguard_step"] for c in chunks]
    out = engine.generate("Count.")
    assert steps == [{**s.trace(), "latency_s": steps[i]["latency_s"],
                      "phase_s": steps[i]["phase_s"]} for i, s in enumerate(out.steps)]
    assert [s["index"] for s in chunks[-1].additional_kwargs["specguard"]["steps"]] == [0, 1]


# ---- item 3: structured answers under a response format ----------------------------------------
def test_a_response_format_verifies_the_answer() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    engine = scripted_engine(lambda p: '{"city": "Oslo"}', lambda p: '{"town": "Oslo"}',
                             config=CFG.merged(response_format_mode="check"))  # checked only
    llm = SpecGuardLLM(engine=engine)
    out = llm.chat([ChatMessage(role="user", content="Where? JSON.")], response_format=schema)
    assert json.loads(out.message.content or "") == {"city": "Oslo"}
    (step,) = out.additional_kwargs["specguard"]["steps"]
    assert step["source"] == "target" and "'city' is a required property" in step[
        "rejected_reason"]


# ---- item 1: chat_with_tools keeps a JSON answer an answer -------------------------------------
def test_chat_with_tools_keeps_a_json_answer() -> None:
    bob = '{"name": "Bob", "age": 42}'
    llm = SpecGuardLLM(engine=scripted_engine(lambda p: bob, config=CFG))
    response = llm.chat_with_tools([_tool()], user_msg="Who is Bob? Answer in JSON.")
    assert json.loads(response.message.content or "") == {"name": "Bob", "age": 42}
    assert llm.get_tool_calls_from_response(response, error_on_no_tool_call=False) == []
    assert response.additional_kwargs["specguard"]["invalid_tool_calls"] == []


def test_logprobs_in_chat_responses() -> None:
    """`logprobs=True` (field or per call) fills ChatResponse.logprobs as llama-index-llms-openai
    does: one `[LogProb]` per answer token, the chosen token first, then `top_logprobs`
    alternatives; streamed, each response holds its own step's tokens."""
    engine = scripted_engine(lambda p: "First.\n\nThe answer is 42.", config=CFG)
    plain = SpecGuardLLM(engine=engine)
    hello = [ChatMessage(role="user", content="Hello")]
    assert plain.chat(hello).logprobs is None
    for response in (SpecGuardLLM(engine=engine, logprobs=True).chat(hello),
                     plain.chat(hello, logprobs=True),
                     asyncio.run(plain.achat(hello, logprobs=True))):
        rows = response.logprobs
        assert rows and all(len(row) == 1 and row[0].logprob <= 0 for row in rows)
        assert "".join(row[0].token for row in rows).strip() == response.message.content
    result = engine.generate("Hello")
    assert [row[0].logprob for row in rows] == [  # each step's own values, answer tokens only
        lp for s in result.steps for tok, lp in zip(s.token_ids, s.token_logprobs, strict=True)
        if tok not in engine.target.eos_ids]
    streamed = list(SpecGuardLLM(engine=engine, logprobs=True).stream_chat(hello))
    assert [r.logprobs for r in streamed] and all(r.logprobs is not None for r in streamed)
    assert [row[0].logprob for r in streamed for row in r.logprobs or []] == \
        [row[0].logprob for row in rows]
    top = plain.chat(hello, logprobs=True, top_logprobs=2).logprobs or []
    assert all(len(row) == 2 and row[1].logprob <= row[0].logprob for row in top)


def test_a_function_agent_runs_on_a_streaming_llm_with_logprobs() -> None:
    from llama_index.core.agent.workflow import FunctionAgent

    engine = scripted_engine(lambda p: "The answer is 42.", config=CFG)
    agent = FunctionAgent(tools=[], llm=SpecGuardLLM(engine=engine, logprobs=True))

    async def run() -> str:
        return str(await agent.run("What is 6 * 7?"))
    assert "42" in asyncio.run(run())


def test_complete_with_a_formatted_prompt_sends_it_raw() -> None:
    engine = scripted_engine(lambda p: "Seven.\n\nForty-two.", config=CFG)
    llm = SpecGuardLLM(engine=engine)
    formatted = "<|im_start|>user\nGo<|im_end|>\n<|im_start|>assistant\nSeven."
    out = llm.complete(formatted, formatted=True)
    assert out.text == "\n\nForty-two."  # the continuation, as written
    calls = engine.draft.model.calls + engine.target.model.calls
    assert formatted.removesuffix("Seven.") in calls and not any("Seven." in c for c in calls)
    assert "".join(r.delta or "" for r in llm.stream_complete(formatted, formatted=True)) == \
        "\n\nForty-two."
    wrapped = llm.complete("Go")  # not formatted: a chat turn
    assert wrapped.text == "Seven.\n\nForty-two."


def test_chat_template_kwargs_reach_the_chat_template() -> None:
    from tests.specguard_integrations.template_helpers import PLAIN, thinking_engine

    engine = thinking_engine()
    hi = [ChatMessage(role="user", content="Hi")]
    thinking = SpecGuardLLM(engine=engine).chat(hi)
    assert thinking.message.content == "Thought it over."
    off = SpecGuardLLM(engine=engine, chat_template_kwargs={"enable_thinking": False})
    assert off.chat(hi).message.content == PLAIN
    assert "".join(r.delta or "" for r in off.stream_chat(hi)) == PLAIN
    assert SpecGuardLLM(engine=engine).complete(
        "Hi", chat_template_kwargs={"enable_thinking": False}).text == PLAIN
    with pytest.raises(ValueError, match=r"cannot set \['tools'\]"):
        SpecGuardLLM(engine=engine, chat_template_kwargs={"tools": []})
