"""`SpecGuardLLM` on the default real pair (opt-in: marker `real`, SPECGUARD_REAL_MODELS=1, the
pair cached where `$SPECGUARD_CACHE` points; skipped otherwise).

Slow on CPU (the 1.5B target writes ~5 tokens/s), so answers are kept short.
"""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core import Document, MockEmbedding, VectorStoreIndex
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage

from specguard_integrations import SpecGuardLLM
from tests.specguard_integrations.llama_index.helpers import (
    HAVE_REAL,
    REAL_REASON,
    real_engine,
)

pytestmark = [pytest.mark.real, pytest.mark.skipif(not HAVE_REAL, reason=REAL_REASON)]


@pytest.fixture(scope="module")
def llm() -> SpecGuardLLM:
    return SpecGuardLLM(engine=real_engine(), max_tokens=48, k=2, temperature=0.0)


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def test_real_metadata(llm: SpecGuardLLM) -> None:
    assert llm.metadata.context_window == 32768
    assert llm.metadata.num_output == 48


def test_real_stream_chat_matches_chat(llm: SpecGuardLLM) -> None:
    messages = [ChatMessage(role="user", content="What is 12 + 30? Answer with the number.")]
    chunks = list(llm.stream_chat(messages))
    assert "42" in (chunks[-1].message.content or "")
    steps = chunks[-1].additional_kwargs["specguard"]["steps"]
    assert len(chunks) == len(steps)
    assert chunks[-1].raw["usage"]["completion_tokens"] == sum(s["tokens"] for s in steps)


def test_real_function_agent(llm: SpecGuardLLM) -> None:
    # the small pair writes untagged JSON calls on its own, so the first turn must call a tool
    agent = FunctionAgent(tools=[multiply], llm=llm, initial_tool_choice="required",
                          system_prompt="Use the multiply tool for any multiplication.")

    async def run() -> list[ToolCallResult]:
        handler = agent.run(user_msg="What is 17 multiplied by 23?")
        events = [e async for e in handler.stream_events() if isinstance(e, ToolCallResult)]
        await handler
        return events

    calls = asyncio.run(run())
    assert [(c.tool_name, c.tool_kwargs) for c in calls][:1] == [("multiply", {"a": 17, "b": 23})]


def test_real_query_engine(llm: SpecGuardLLM) -> None:
    index = VectorStoreIndex.from_documents(
        [Document(text="The Harbor Street Library opens at noon on Sundays.")],
        embed_model=MockEmbedding(embed_dim=8))
    answer = index.as_query_engine(llm=llm).query("When does the library open on Sundays?")
    assert "sunday" in str(answer).lower()  # an answer about the context (its quality varies)
    assert len(answer.source_nodes) == 1
