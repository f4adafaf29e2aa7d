"""LangGraph agents on ChatSpecGuard (LangChain's `create_agent` and LangGraph's
`create_react_agent`) over scripted pairs: a task that needs a tool call, recovery after a
misspelt call, a structured response. The real pair runs an agent in tests/examples (the
agent of examples/langchain_agent.py)."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import BaseModel

from specguard_core.testing import scripted_engine
from specguard_integrations.langchain import ChatSpecGuard
from tests.specguard_integrations.langchain.helpers import shared_engine


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


def _misspells_first(prompt: str) -> str:
    """A model that misspells the tool in its first call, then reads the tool node's error and
    calls it by its right name, then answers from the result."""
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.DOTALL)
    if not results:
        return '<tool_call>\n{"name": "ad", "arguments": {"a": 3, "b": 4}}\n</tool_call>'
    if results[-1].startswith("Error"):
        return '<tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call>'
    return f"The sum is {results[-1]}."


@pytest.mark.parametrize("build", BUILDERS, ids=["create_agent", "create_react_agent"])
def test_agent_recovers_after_a_misspelt_tool_call(build: Callable[[ChatSpecGuard], Any]) -> None:
    """A call that names no offered tool is a tool call, as ChatOpenAI/ChatOllama return one: the
    tool node answers "Error: ad is not a valid tool" and the model tries again."""
    pytest.importorskip("langchain.agents" if build is _create_agent else "langgraph.prebuilt")
    engine = scripted_engine(_misspells_first)
    agent = build(ChatSpecGuard(engine=engine, temperature=0))
    messages = _run(agent, "What is 3 + 4?")
    first, error, second, result, answer = messages[1:]
    assert [c["name"] for c in first.tool_calls] == ["ad"] and not first.invalid_tool_calls
    (call_id,) = first.response_metadata["specguard_tool_call_errors"]
    assert call_id == first.tool_calls[0]["id"]
    assert isinstance(error, ToolMessage) and "ad is not a valid tool" in str(error.content)
    assert [(c["name"], c["args"]) for c in second.tool_calls] == [("add", {"a": 3, "b": 4})]
    assert "specguard_tool_call_errors" not in second.response_metadata
    assert isinstance(result, ToolMessage) and result.content == "7"
    assert isinstance(answer, AIMessage) and answer.content == "The sum is 7."


class Person(BaseModel):
    """A person."""

    name: str
    age: int


def _fences_its_json(prompt: str) -> str:
    assert "JSON schema" in prompt  # the response format's instruction reached the model
    return '```json\n{"name": "Ada", "age": 36}\n```'


def test_agent_structured_response_from_fenced_json() -> None:
    """A draft that fences its JSON passes the format check, and the agent's response format
    parses the answer (`json.loads` of the message text: the fence is not part of it)."""
    from langchain.agents import create_agent

    model = ChatSpecGuard(engine=scripted_engine(_fences_its_json), temperature=0)
    agent = create_agent(model, tools=[], response_format=Person)
    out = agent.invoke({"messages": [HumanMessage("Ada is 36. Who is she?")]})
    assert out["structured_response"] == Person(name="Ada", age=36)
    assert json.loads(out["messages"][-1].content) == {"name": "Ada", "age": 36}
