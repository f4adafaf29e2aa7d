"""A LangGraph agent with two tools completes a task that needs a tool call: LangChain's
`create_agent` and LangGraph's `create_react_agent`, over the scripted pair in CI and over the
real pair as an opt-in example."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from specguard_core import NormBounds, preset
from specguard_integrations.langchain import ChatSpecGuard
from tests.specguard_integrations.langchain_helpers import (
    HAVE_REAL,
    REAL_REASON,
    real_engine,
    shared_engine,
)


@tool
def add(a: int, b: int) -> int:
    """Add two integers and return the sum."""
    return a + b


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"It is sunny in {city}."


def _create_agent(model: ChatSpecGuard) -> Any:
    from langchain.agents import create_agent

    return create_agent(model, tools=[add, get_weather])


def _create_react_agent(model: ChatSpecGuard) -> Any:
    from langgraph.prebuilt import create_react_agent

    with warnings.catch_warnings():  # deprecated in favour of create_agent, still widely used
        warnings.simplefilter("ignore")
        return create_react_agent(model, tools=[add, get_weather])


BUILDERS: list[Callable[[ChatSpecGuard], Any]] = [_create_agent, _create_react_agent]


def _run(agent: Any, question: str) -> list[Any]:
    return list(agent.invoke({"messages": [HumanMessage(question)]})["messages"])


@pytest.mark.parametrize("build", BUILDERS, ids=["create_agent", "create_react_agent"])
def test_agent_uses_a_tool_to_answer(build: Callable[[ChatSpecGuard], Any]) -> None:
    pytest.importorskip("langchain.agents" if build is _create_agent else "langgraph.prebuilt")
    agent = build(ChatSpecGuard(engine=shared_engine(), temperature=0))
    messages = _run(agent, "What is 3 + 4? Use the add tool.")
    call, result, answer = messages[1:]
    assert isinstance(call, AIMessage)
    assert [(c["name"], c["args"]) for c in call.tool_calls] == [("add", {"a": 3, "b": 4})]
    assert isinstance(result, ToolMessage) and result.content == "7"
    assert result.tool_call_id == call.tool_calls[0]["id"]
    assert isinstance(answer, AIMessage) and not answer.tool_calls
    assert answer.content == "The tool returned 7.\n\nSo the answer is 7."
    trace = call.response_metadata["specguard_steps"]
    assert trace[0]["source"] == "target"  # the draft's call was rejected and regenerated


BOUNDS = Path(__file__).resolve().parents[2] / "benchmarks" / "bounds-qwen2.5-coder-0.5b.json"
SYSTEM = ("Use the tools for arithmetic. Once you have the tool's result, reply to the user in one "
          "plain English sentence that states the number.")


@pytest.mark.real
@pytest.mark.skipif(not HAVE_REAL, reason=REAL_REASON)
def test_agent_on_the_real_pair() -> None:
    """The settings of examples/langchain_agent.py: preset "fast", the pair's calibrated bounds,
    a stricter tau, and a middleware that asks for a call first and for the answer after it."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import wrap_model_call

    @wrap_model_call
    def call_then_answer(request: Any, handler: Any) -> Any:
        called = any(isinstance(m, ToolMessage) for m in request.messages)
        return handler(request.override(tool_choice="none" if called else "any"))

    bounds = {"bounds": NormBounds.load(BOUNDS)} if BOUNDS.is_file() else {}
    model = ChatSpecGuard(engine=real_engine(), config=preset("fast", tau=0.8, **bounds),
                          max_tokens=128)
    agent = create_agent(model, tools=[add, get_weather], middleware=[call_then_answer],
                         system_prompt=SYSTEM)
    messages = _run(agent, "A shop has 1234 red pens and 4321 blue pens. How many pens does it "
                           "have? Use a tool to compute it.")
    calls = [c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert [(c["name"], c["args"]) for c in calls] == [("add", {"a": 1234, "b": 4321})]
    assert any(isinstance(m, ToolMessage) and m.content == "5555" for m in messages)
    assert "5555" in str(messages[-1].content).replace(",", "")
