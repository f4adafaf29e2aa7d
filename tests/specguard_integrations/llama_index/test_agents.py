"""`SpecGuardLLM` inside LlamaIndex: agents, workflows, query engines, structured prediction."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document, MockEmbedding, VectorStoreIndex
from llama_index.core.agent.workflow import (
    AgentStream,
    AgentWorkflow,
    FunctionAgent,
    ReActAgent,
    ToolCallResult,
)
from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.prompts import PromptTemplate
from pydantic import BaseModel

from specguard_core.engine.loop import SpecGuardEngine
from specguard_integrations.llama_index import SpecGuardLLM
from tests.specguard_integrations.llama_index.helpers import make_engine

QUESTION = "What is 6 multiplied by 7? Use the multiply tool."


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@pytest.fixture(scope="module")
def engine() -> SpecGuardEngine:
    return make_engine()


@pytest.fixture
def llm(engine: SpecGuardEngine) -> SpecGuardLLM:
    return SpecGuardLLM(engine=engine)


async def _run(agent: Any, message: str) -> tuple[Any, list[Any]]:
    handler = agent.run(user_msg=message)
    events = [event async for event in handler.stream_events()]
    return await handler, events


@pytest.mark.parametrize("streaming", [True, False])
def test_function_agent_calls_a_tool_and_finishes(llm: SpecGuardLLM, streaming: bool) -> None:
    agent = FunctionAgent(tools=[multiply], llm=llm, streaming=streaming,
                          system_prompt="You are a calculator.")
    result, events = asyncio.run(_run(agent, QUESTION))
    calls = [e for e in events if isinstance(e, ToolCallResult)]
    assert [(c.tool_name, c.tool_kwargs, c.tool_output.content) for c in calls] == \
        [("multiply", {"a": 6, "b": 7}, "42")]
    assert str(result.response.content) == "The tool says 42.\n\nDone."
    assert [c.tool_name for c in result.tool_calls] == ["multiply"]  # the run's calls
    if streaming:
        deltas = [e.delta for e in events if isinstance(e, AgentStream)]
        assert "".join(deltas).endswith("The tool says 42.\n\nDone.")


def test_function_agent_initial_tool_choice(llm: SpecGuardLLM) -> None:
    agent = FunctionAgent(tools=[multiply], llm=llm, initial_tool_choice="multiply")
    result, events = asyncio.run(_run(agent, "6 and 7, please"))
    assert [e.tool_output.content for e in events if isinstance(e, ToolCallResult)] == ["42"]
    assert "42" in str(result.response.content)


def test_agent_workflow_from_tools_or_functions(llm: SpecGuardLLM) -> None:
    workflow = AgentWorkflow.from_tools_or_functions([multiply], llm=llm)
    assert isinstance(workflow.agents[next(iter(workflow.agents))], FunctionAgent)
    result, events = asyncio.run(_run(workflow, QUESTION))
    assert [e.tool_output.content for e in events if isinstance(e, ToolCallResult)] == ["42"]
    assert str(result.response.content) == "The tool says 42.\n\nDone."


def test_react_agent_runs(llm: SpecGuardLLM) -> None:
    agent = ReActAgent(tools=[multiply], llm=llm)
    result, events = asyncio.run(_run(agent, QUESTION))
    calls = [e for e in events if isinstance(e, ToolCallResult)]
    assert [(c.tool_name, c.tool_kwargs, c.tool_output.content) for c in calls] == \
        [("multiply", {"a": 6, "b": 7}, "42")]
    assert str(result.response.content) == "The result is 42."


DOCS = [
    "The Eiffel Tower is 330 metres tall and stands in Paris.",
    "SpecGuard accepts a draft step when its confidence and grounding are high enough.",
]


@pytest.fixture
def index() -> VectorStoreIndex:
    return VectorStoreIndex.from_documents([Document(text=t) for t in DOCS],
                                           embed_model=MockEmbedding(embed_dim=8))


def test_query_engine_answers(llm: SpecGuardLLM, index: VectorStoreIndex) -> None:
    engine = index.as_query_engine(llm=llm, similarity_top_k=2)
    response = engine.query("How tall is the Eiffel Tower?")
    assert str(response).startswith("According to the context, ")
    assert any(doc in str(response) for doc in DOCS)
    assert len(response.source_nodes) == 2


def test_query_and_chat_engines_load_the_pair_at_the_first_question(
        monkeypatch: pytest.MonkeyPatch, index: VectorStoreIndex, tmp_path: Path) -> None:
    """Building query engines, chat engines and their memory reads `metadata`, which answers from
    the model folders' config.json files; the pair loads when the first question is asked."""
    from llama_index.core.chat_engine import SimpleChatEngine
    from transformers import Qwen2Config

    for name, window in (("draft", 8192), ("target", 4096)):
        Qwen2Config(max_position_embeddings=window).save_pretrained(tmp_path / name)
    loads: list[tuple[str, str]] = []

    def load(cls: type, draft: str, target: str, **kwargs: Any) -> SpecGuardEngine:
        loads.append((draft, target))
        return make_engine()

    monkeypatch.setattr(SpecGuardEngine, "from_pretrained", classmethod(load))
    lazy = SpecGuardLLM(draft=str(tmp_path / "draft"), target=str(tmp_path / "target"),
                        max_tokens=300)
    query_engine = index.as_query_engine(llm=lazy, similarity_top_k=2)
    chat_engine = index.as_chat_engine(llm=lazy, chat_mode="condense_plus_context")
    simple = SimpleChatEngine.from_defaults(llm=lazy)
    meta = lazy.metadata
    assert (meta.context_window, meta.num_output) == (4096, 300)
    assert meta.model_name == f"specguard:{tmp_path / 'draft'}+{tmp_path / 'target'}"
    assert loads == []
    assert str(query_engine.query("How tall is the Eiffel Tower?")).startswith(
        "According to the context, ")
    assert loads == [(str(tmp_path / "draft"), str(tmp_path / "target"))]
    assert lazy.metadata.model_name == "specguard-scripted"  # the loaded engine's, once loaded
    assert str(simple.chat("hi")) == "Hello there.\n\nThe answer is 7."
    assert str(chat_engine.chat("How tall is the Eiffel Tower?"))
    assert len(loads) == 1


def test_query_engine_streams(llm: SpecGuardLLM, index: VectorStoreIndex) -> None:
    engine = index.as_query_engine(llm=llm, similarity_top_k=2, streaming=True)
    response = engine.query("How tall is the Eiffel Tower?")
    assert isinstance(response, StreamingResponse)
    tokens = list(response.response_gen)
    assert len(tokens) == 2  # one delta per committed step
    assert "".join(tokens).startswith("According to the context, ")


def test_query_engine_streams_async(llm: SpecGuardLLM, index: VectorStoreIndex) -> None:
    async def run() -> list[str]:
        engine = index.as_query_engine(llm=llm, similarity_top_k=2, streaming=True)
        response = await engine.aquery("How tall is the Eiffel Tower?")
        assert isinstance(response, AsyncStreamingResponse)
        return [t async for t in response.async_response_gen()]

    assert "".join(asyncio.run(run())).startswith("According to the context, ")


class Person(BaseModel):
    """A person mentioned in the text."""

    name: str
    age: int


def test_structured_predict_returns_pydantic_object(llm: SpecGuardLLM) -> None:
    prompt = PromptTemplate("Extract the person from this text: {text}")
    person = llm.structured_predict(Person, prompt, text="'Alice' is 30 years old.")
    assert person == Person(name="Alice", age=30)
    later = asyncio.run(llm.astructured_predict(Person, prompt, text="'Bob' turned 41."))
    assert later == Person(name="Bob", age=41)


def test_stream_structured_predict(llm: SpecGuardLLM) -> None:
    prompt = PromptTemplate("Extract the person from this text: {text}")
    parts = list(llm.stream_structured_predict(Person, prompt, text="'Carol' is 52."))
    assert parts[-1] == Person(name="Carol", age=52)
